"""The reference engine: ``transformers`` ``generate`` on the engine's own copy of the model.

Slow but simple, and it runs any causal LM transformers can: it is the native engine's
correctness reference and its fallback for architectures the native engine does not implement.

Randomness: transformers samples from torch's global generator, so this engine seeds it inside
``torch.random.fork_rng`` (the caller's RNG state is untouched). A seeded request is generated
in a batch of its own to make it reproducible on its own; unseeded requests are batched
together (apart from prompts the context window cuts short), each batch under one seed drawn
from the engine's generator. Samples are therefore reproducible but not the same as the native
engine's (greedy outputs are).
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from rlxf.rollout.base import (
    EngineOptions,
    RequestLike,
    SamplingParams,
    as_requests,
    check_sampling_params,
    error_completions,
    validate_prompt,
)
from rlxf.rollout.native.engine import model_eos_ids
from rlxf.rollout.native.model import NativeWeights
from rlxf.rollout.sampling import NonFiniteLogits, derive_seed
from rlxf.rollout.stop import StopStrings
from rlxf.types import Completion


def _token_ids_only(config):
    """A generation config with only the model's special token ids.

    A saved ``generation_config.json`` often sets sampling knobs (Qwen2.5-Instruct:
    ``repetition_penalty=1.05``); ``generate`` applies every field a call does not override, so
    they would reshape the distribution the tokens are drawn from while the reported log-probs
    (and the native engine, and the trainer) use the plain ``softmax(z / T)``.
    """
    from transformers import GenerationConfig

    keep = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id")
    return GenerationConfig(**{k: getattr(config, k, None) for k in keep if getattr(config, k, None) is not None})


def model_context_window(config) -> int | None:
    """The longest sequence a transformers config allows: ``max_position_embeddings`` or the name
    an older architecture gives it (MPT's ``max_seq_len``), None where there is none (Bloom's
    ALiBi positions have no limit)."""
    text = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    for name in ("max_position_embeddings", "max_seq_len", "n_positions", "seq_length"):
        value = getattr(text, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def _response_stop_criteria(matcher: StopStrings, prompt_width: int):
    """A transformers stopping criterion ending a row when its response text (the tokens after
    column ``prompt_width``) holds a stop string: the check the native engine makes."""
    from transformers import StoppingCriteria, StoppingCriteriaList

    class ResponseStopStrings(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            new = input_ids[:, prompt_width:].cpu()
            done = torch.zeros(new.shape[0], dtype=torch.bool)
            for i in matcher.candidates(new[:, -1]).nonzero().flatten().tolist():
                done[i] = matcher.ends_here(new[i].tolist())
            return done.to(input_ids.device)

    return StoppingCriteriaList([ResponseStopStrings()])


def _finite_logits_check(prompt_width: int, version: int):
    """A transformers logits processor raising ``NonFiniteLogits`` before a step samples from logits
    holding NaN or +inf (one max over the vocabulary per step, as the native sampler checks). Matching
    torch.multinomial's error text instead broke whenever torch reworded it, and argmax raises nothing."""
    from transformers import LogitsProcessor, LogitsProcessorList

    class FiniteLogits(LogitsProcessor):
        def __call__(self, input_ids, scores):
            bad = ~torch.isfinite(scores.amax(-1))  # max propagates NaN
            if bool(bad.any()):
                step = input_ids.shape[1] - prompt_width
                where = f"hf engine (policy version {version}), response token [{step}]: "
                raise NonFiniteLogits(bad.nonzero().flatten().tolist(), where=where)
            return scores

    # the engine's generation config holds token ids only (_token_ids_only), so generate adds just its
    # sampling warpers, and puts them after the caller's processors: this one sees the raw logits
    return LogitsProcessorList([FiniteLogits()])


class HFEngine:
    """``transformers.generate`` behind the Engine interface."""

    name = "hf"

    def __init__(self, model, tokenizer=None, options: EngineOptions | None = None):
        from rlxf.models.loading import lora_layers, merged_state_dict, unwrap_model

        options = options or EngineOptions()
        base = unwrap_model(model)
        if lora_layers(model):
            # LoRA layers (in a PEFT wrapper or not): our own plain copy, with the deltas merged in
            from transformers import AutoModelForCausalLM

            self.model = AutoModelForCausalLM.from_config(copy.deepcopy(base.config))
            missing, unexpected = self.model.load_state_dict(merged_state_dict(model), strict=False)
            if unexpected or set(missing) - {"lm_head.weight"}:
                raise KeyError(f"merged LoRA weights do not fit the base architecture: missing {missing[:5]}, "
                               f"unexpected {unexpected[:5]}")
        else:
            self.model = copy.deepcopy(base)
        self.model.generation_config = _token_ids_only(getattr(base, "generation_config", None))
        param = next(base.parameters())   # the policy's device and dtype (a LoRA copy is built on CPU in fp32)
        device = torch.device(options.device) if options.device is not None else param.device
        self.model.to(device=device, dtype=options.dtype or param.dtype).eval()
        self.model.config.use_cache = True
        self.device = device
        self.options = options
        self.tokenizer = tokenizer
        self.vocab_size = self.model.config.vocab_size
        self._stop_cache: dict[tuple[str, ...], StopStrings] = {}   # a matcher decodes the whole vocabulary
        limits = [n for n in (model_context_window(self.model.config), options.max_model_len) if n is not None]
        self.context_window = min(limits) if limits else sys.maxsize
        self.eos_ids = model_eos_ids(self.model, tokenizer)
        # the first pad id the embedding has a row for (early LLaMA conversions say -1), else 0:
        # left padding is masked, so any row does
        pads = (getattr(self.model.generation_config, "pad_token_id", None),
                getattr(tokenizer, "pad_token_id", None) if tokenizer is not None else None)
        self.pad_id = next((int(p) for p in pads if isinstance(p, int) and 0 <= p < self.vocab_size), 0)
        self.policy_version = 0
        self._params = dict(self.model.named_parameters(remove_duplicate=False))
        self._seed_rng = np.random.default_rng(options.seed)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Copy new weights in and set the version. Every name and shape is checked before the first
        copy: a refused update leaves the weights as they were, not half new under the old version."""
        unknown, copies = [], []
        for raw, tensor in named_tensors:
            name = NativeWeights.normalize_name(raw)
            target = self._params.get(name)
            if target is None:
                if "rotary_emb" not in name:
                    unknown.append(raw)
                continue
            if tensor.shape != target.shape:  # copy_ would broadcast a smaller tensor silently
                raise ValueError(f"update_weights: {raw} has shape {tuple(tensor.shape)}, the engine's copy "
                                 f"{tuple(target.shape)}; is this the same model architecture?")
            copies.append((target, tensor))
        if unknown:
            raise KeyError(f"update_weights: {len(unknown)} names the engine does not know, e.g. {unknown[:5]}")
        with torch.no_grad():
            for target, tensor in copies:
                target.copy_(tensor.detach())
        self.policy_version = int(version)

    def generate(self, requests: Sequence[RequestLike], sampling: SamplingParams) -> list[list[Completion]]:
        check_sampling_params(sampling, vocab_size=self.vocab_size, engine=self.name)
        reqs = as_requests(requests)
        results: list[list[Completion] | None] = [None] * len(reqs)
        seeded: list[tuple[int, int]] = []
        unseeded: list[int] = []
        for i, r in enumerate(reqs):
            reason = validate_prompt(r.prompt_ids, vocab_size=self.vocab_size, context_window=self.context_window)
            if reason is not None:
                results[i] = error_completions(reason, sampling.n, self.policy_version)
            elif r.seed is not None:
                seeded.append((i, int(r.seed)))
            elif sampling.seed is not None:
                seeded.append((i, derive_seed(sampling.seed, i)))
            else:
                unseeded.append(i)
        for i, seed in seeded:  # a seeded request on its own, so its samples do not depend on the batch
            results[i] = self._generate([reqs[i].prompt_ids], sampling, seed)[0]
        # A batch decodes max_new_tokens = its largest length limit for every row, so a prompt whose
        # limit the context window cuts (prompt + max_new_tokens > window) is batched only with
        # prompts of the same limit: with a shorter prompt it would run past the window (learned
        # position embeddings have no row there: GPT-2 and OPT fail with an index error).
        by_limit: dict[int, list[int]] = {}
        for i in unseeded:
            by_limit.setdefault(min(sampling.max_new_tokens, self.context_window - len(reqs[i].prompt_ids)), []).append(i)
        per_batch = max(1, self.options.max_batch_size // sampling.n)
        for same in by_limit.values():
            for start in range(0, len(same), per_batch):
                chunk = same[start:start + per_batch]
                batch_seed = int(self._seed_rng.integers(0, 2**63 - 1))
                for i, comps in zip(chunk, self._generate([reqs[i].prompt_ids for i in chunk], sampling, batch_seed),
                                    strict=True):
                    results[i] = comps
        return results  # type: ignore[return-value]

    @torch.no_grad()
    def _stop_matcher(self, strings: tuple[str, ...]) -> StopStrings:
        if strings not in self._stop_cache:   # built once per set of strings, not once per seeded request
            self._stop_cache[strings] = StopStrings(self.tokenizer, strings, self.vocab_size)
        return self._stop_cache[strings]

    def _generate(self, prompts: list[Sequence[int]], sp: SamplingParams, seed: int) -> list[list[Completion]]:
        lengths = [len(p) for p in prompts]
        width = max(lengths)
        ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(prompts), width), dtype=torch.long)
        for i, p in enumerate(prompts):  # left padding: every prompt ends at the same column
            ids[i, width - len(p):] = torch.as_tensor(list(p), dtype=torch.long)
            mask[i, width - len(p):] = 1
        limits = [min(sp.max_new_tokens, self.context_window - n) for n in lengths]
        stops = sorted(set(sp.stop_token_ids) | (set() if sp.ignore_eos else set(self.eos_ids)))
        copies = 1 if sp.greedy else sp.n  # greedy samples are all the same: decode once, repeat
        kwargs = dict(
            max_new_tokens=max(limits), num_return_sequences=copies, do_sample=not sp.greedy,
            eos_token_id=stops or None, pad_token_id=self.pad_id,
            return_dict_in_generate=True, output_logits=True, use_cache=True,
            logits_processor=_finite_logits_check(width, self.policy_version),
        )
        if sp.greedy:
            kwargs.update(temperature=None, top_k=None, top_p=None)
        else:
            kwargs.update(temperature=sp.temperature, top_k=sp.top_k, top_p=sp.top_p)
        matcher = self._stop_matcher(tuple(sp.stop_strings)) if sp.stop_strings else None
        if matcher is not None:
            # not transformers' own stop_strings: those also match text that begins in the prompt,
            # ending a row that the response-only check below would then report as "length"
            kwargs.update(stopping_criteria=_response_stop_criteria(matcher, width))
        with torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else []):
            torch.manual_seed(seed % 2**63)
            out = self.model.generate(
                input_ids=ids.to(self.device), attention_mask=mask.to(self.device), **kwargs
            )
        new = out.sequences[:, width:]
        logits = torch.stack(out.logits, dim=1).float()               # (B*n, steps, V), raw
        if not sp.greedy:
            logits = logits / sp.temperature
        lps = torch.log_softmax(logits, -1).gather(-1, new[..., None]).squeeze(-1)
        stop_set = set(stops)
        results = []
        new_l, lps_l = new.tolist(), lps.tolist()
        for i in range(len(prompts)):
            comps = []
            for j in range(sp.n):
                row = i * copies + (j if copies > 1 else 0)
                toks, limit = new_l[row][: limits[i]], limits[i]
                end, reason = limit, "length"
                for t, tok in enumerate(toks):
                    if tok in stop_set:
                        end, reason = t + 1, "stop"
                        break
                if matcher is not None:
                    hit = matcher.first_stop(toks[:end])
                    if hit is not None and (reason != "stop" or hit < end):
                        end, reason = hit, "stop_string"
                comps.append(Completion(response_ids=toks[:end], logprobs=lps_l[row][:end],
                                        finish_reason=reason, policy_version=self.policy_version))
            results.append(comps)
        return results
