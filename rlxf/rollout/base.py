"""What every rollout engine takes and returns.

    engine = build_engine("native", model, tokenizer)
    groups = engine.generate([[1, 2, 3], GenerationRequest([4, 5], seed=7)], SamplingParams(n=8))
    groups[i][j]            # the j-th of n Completions of request i
    engine.update_weights(model.named_parameters(), version=step)

**Which log-prob an engine reports.** For response token a_t sampled at state s_t (prompt plus
a_<t), ``Completion.logprobs[t]`` is

    log softmax(z_t / temperature)[a_t]                    (temperature > 0)
    log softmax(z_t)[a_t]                                  (temperature == 0, greedy)

with z_t the model's logits: after temperature scaling and BEFORE top-k / top-p truncation. It
is exactly what the trainer recomputes with ``rlxf.models.logprobs.sequence_logprobs(...,
temperature=T)``, so the engine/trainer gap measures numerics and staleness only. (With top-k or
top-p the token was drawn from the truncated, renormalised distribution; the reported value is
still the untruncated one, as in vLLM's default.)
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol, runtime_checkable

import torch

from rlxf.errors import UserInputError
from rlxf.types import Completion

# smallest nonzero temperature: below it logits / T overflows float32 (NaN log-probs, garbage tokens)
MIN_TEMPERATURE = 1e-6


def _is_int(value) -> bool:
    """An integer (Python, numpy or 0-dim torch), not a bool and not a float with an integral value."""
    if isinstance(value, bool) or (isinstance(value, torch.Tensor) and value.dim() > 0):
        return False  # torch lets a one-element tensor of any shape pass operator.index
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


def _coerce_fields(obj, *, ints=(), optional_ints=(), reals=(), bools=()) -> list[str]:
    """Check the types of a frozen dataclass's fields, store them as plain int / float / bool, and
    return what was wrong. Without it a float count sampled int(count) tokens in one engine and
    failed deep in another, and a float seed of 1.2 sampled as seed 1."""
    problems = []
    for name in ints + optional_ints:
        value = getattr(obj, name)
        if value is None and name in optional_ints:
            continue
        if _is_int(value):
            object.__setattr__(obj, name, operator.index(value))
        else:
            problems.append(f"{name} must be an integer{' or None' if name in optional_ints else ''} (got {value!r})")
    for name in reals:
        value = getattr(obj, name)
        if isinstance(value, numbers.Real) and not isinstance(value, bool):
            object.__setattr__(obj, name, float(value))
        else:
            problems.append(f"{name} must be a number (got {value!r})")
    for name in bools:
        if not isinstance(getattr(obj, name), bool):
            problems.append(f"{name} must be True or False (got {getattr(obj, name)!r})")
    return problems


@dataclass(frozen=True)
class SamplingParams:
    """How to sample: shared by every request of one ``generate`` call.

    ``temperature == 0`` is greedy decoding (argmax; top-k, top-p and seeds are then ignored).
    ``stop_token_ids`` end a response when sampled (the token is kept in ``response_ids``); an
    engine refuses ids outside its model's vocabulary, which could never be sampled. Unless
    ``ignore_eos``, the model's own eos ids (generation config / tokenizer) are added to them.
    ``stop_strings`` end a response as soon as its decoded text contains one of them (the
    token that completed the string is kept; the engine needs a tokenizer); a lone string or id
    is one stop string or id. A response also ends ("length") at the context window: it gets
    at most min(``max_new_tokens``, context window - prompt length) tokens. ``seed`` makes an
    unseeded request reproducible: request i of the call then uses a seed derived from
    (seed, i); a request's own seed wins over it.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 128
    stop_token_ids: tuple[int, ...] = ()
    stop_strings: tuple[str, ...] = ()
    seed: int | None = None
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        problems = _coerce_fields(self, ints=("n", "top_k", "max_new_tokens"), optional_ints=("seed",),
                                  reals=("temperature", "top_p"), bools=("ignore_eos",))
        # Tuples keep the dataclass hashable and frozen even when lists are passed in. A lone
        # string is one stop string (as in vLLM and transformers), not one per character; a
        # lone id is one stop id.
        strings = (self.stop_strings,) if isinstance(self.stop_strings, str) else self.stop_strings
        ids = (self.stop_token_ids,) if _is_int(self.stop_token_ids) else self.stop_token_ids
        try:
            strings, ids = tuple(strings), tuple(ids)
        except TypeError:
            problems.append(f"stop_strings must be a string or a sequence of strings and stop_token_ids an "
                            f"int or a sequence of ints (got {self.stop_strings!r} and {self.stop_token_ids!r})")
            strings, ids = (), ()
        if not all(isinstance(s, str) for s in strings):
            problems.append(f"stop_strings must be strings (got {list(strings)!r})")
        if not all(_is_int(t) for t in ids):
            problems.append(f"stop_token_ids must be integer token ids (got {list(ids)!r})")
        if problems:
            raise ValueError("invalid SamplingParams: " + "; ".join(problems))
        object.__setattr__(self, "stop_token_ids", tuple(operator.index(t) for t in ids))
        object.__setattr__(self, "stop_strings", strings)
        if self.n < 1:
            problems.append(f"n must be >= 1 (got {self.n})")
        if not (math.isfinite(self.temperature) and (self.temperature == 0 or self.temperature >= MIN_TEMPERATURE)):
            problems.append(f"temperature must be 0 (greedy) or a finite number >= {MIN_TEMPERATURE:g} (smaller "
                            f"ones overflow logits / temperature) (got {self.temperature})")
        if not (math.isfinite(self.top_p) and 0.0 < self.top_p <= 1.0):
            problems.append(f"top_p must be in (0, 1], 1 = off (got {self.top_p})")
        if self.top_k < 0:
            problems.append(f"top_k must be >= 0, 0 = off (got {self.top_k})")
        if self.max_new_tokens < 1:
            problems.append(f"max_new_tokens must be >= 1 (got {self.max_new_tokens})")
        if any(t < 0 for t in self.stop_token_ids):
            problems.append(f"stop_token_ids must be token ids >= 0 (got {list(self.stop_token_ids)})")
        if any(s == "" for s in self.stop_strings):
            problems.append("stop_strings must not contain the empty string")
        if self.seed is not None and not 0 <= self.seed < 2**63:
            problems.append(f"seed must be in [0, 2**63) (got {self.seed})")
        if problems:
            raise ValueError("invalid SamplingParams: " + "; ".join(problems))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @classmethod
    def from_config(cls, cfg, **overrides) -> SamplingParams:
        """From a ``rollout:`` config section (``rlxf.config.rollout.RolloutConfig``).

        ``cfg.seed`` seeds the engine (``build_engine_from_config``), not each call: a fixed
        per-call seed would give every step the same random numbers.
        """
        values = dict(
            n=cfg.n, temperature=cfg.temperature, top_p=cfg.top_p, top_k=cfg.top_k,
            max_new_tokens=cfg.max_new_tokens, stop_token_ids=tuple(cfg.stop_token_ids),
            stop_strings=tuple(cfg.stop_strings), ignore_eos=cfg.ignore_eos,
        )
        values.update(overrides)
        return cls(**values)


@dataclass(frozen=True)
class GenerationRequest:
    """One prompt (token ids after the chat template) and, optionally, its own sampling seed.

    A seeded request samples the same tokens whatever else is in the batch and whichever cache
    slot it lands in (the native engine draws its random numbers from (seed, sample index, step)).
    """

    prompt_ids: Sequence[int]
    seed: int | None = None

    def __post_init__(self) -> None:
        if not (type(self.prompt_ids) is list and all(type(t) is int for t in self.prompt_ids)):
            object.__setattr__(self, "prompt_ids", _prompt_ids(self.prompt_ids))  # not every rollout's case
        # the native engine hashes the seed as an unsigned 64-bit word and the hf engine seeds torch
        # with it: one range both take alike, checked here rather than as a failure mid-call
        if self.seed is None:
            return
        try:
            seed = operator.index(self.seed)
        except TypeError:
            seed = None
        if seed is None or not 0 <= seed < 2**63:
            raise ValueError(f"GenerationRequest seed must be an integer in [0, 2**63), or None for one the "
                             f"engine draws (got {self.seed!r})")
        object.__setattr__(self, "seed", seed)


RequestLike = GenerationRequest | Sequence[int]


def _prompt_ids(ids) -> list[int]:
    """``ids`` as a list of ints. Text where ids belong failed deep in the engine ("invalid
    literal for int()"), and float ids were truncated into another prompt without a word."""
    if isinstance(ids, (str, bytes)):
        raise ValueError(f"GenerationRequest prompt_ids must be token ids, not text ({ids[:40]!r}): "
                         f"tokenize the prompt first (tokenizer.encode, or apply_chat_template for chat)")
    try:
        listed = list(ids)
    except TypeError:
        listed = None
    bad = [t for t in listed if not _is_int(t)] if listed is not None else None
    if listed is None or bad:
        got = f"{ids!r}" if listed is None else f"{type(ids).__name__} holding {bad[:3]!r}"
        raise ValueError(f"GenerationRequest prompt_ids must be a sequence of integer token ids (got {got}): "
                         f"tokenize the prompt first (tokenizer.encode, or apply_chat_template for chat)")
    return [operator.index(t) for t in listed]


def as_requests(requests: Iterable[RequestLike]) -> list[GenerationRequest]:
    """Accept plain lists of prompt ids where a request without its own seed is meant."""
    out = []
    for i, r in enumerate(requests):
        if isinstance(r, GenerationRequest):
            out.append(r)
            continue
        # one prompt's ids where the list of prompts belongs: a 1-D tensor became one-token prompts
        if _is_int(r):
            raise ValueError(
                f"request {i}: GenerationRequest prompt_ids must be a sequence of integer token ids (got a single "
                f"token id, {int(r)}): generate takes a list of prompts, each a list of token ids; for one prompt "
                f"call generate([ids], ...)"
            )
        if isinstance(r, torch.Tensor):
            if r.dim() > 2 or (r.dim() == 2 and r.shape[0] != 1):  # reshape(-1) would join its rows into one
                raise ValueError(
                    f"request {i} is a tensor of shape {tuple(r.shape)}: one prompt is 1-D (or 1 x T); "
                    f"pass each row as its own request (list(tensor))"
                )
            r = r.reshape(-1).tolist()
        try:
            out.append(GenerationRequest(r))
        except ValueError as e:
            raise ValueError(f"request {i}: {e}") from None
    return out


def validate_prompt(prompt_ids: Sequence[int], *, vocab_size: int, context_window: int) -> str | None:
    """Why this prompt cannot be generated from, or None when it can.

    A failed request gets ``finish_reason="error"`` completions carrying this reason; the other
    requests of the batch are unaffected.
    """
    if len(prompt_ids) == 0:
        return "empty prompt: give at least one token (e.g. the chat template's opening tokens)"
    if len(prompt_ids) >= context_window:
        return (f"prompt has {len(prompt_ids)} tokens but the context window is {context_window}: "
                f"no room to generate; shorten the prompt (data.max_prompt_len) or use a longer-context model")
    bad = [t for t in prompt_ids if not 0 <= int(t) < vocab_size]
    if bad:
        return f"prompt holds token ids outside the vocabulary [0, {vocab_size}): {bad[:5]}"
    return None


def check_sampling_params(sampling: SamplingParams, *, vocab_size: int, engine: str) -> None:
    """Refuse, before any work, sampling an engine cannot honour: not a ``SamplingParams``, or a
    stop id outside the model's vocabulary [0, ``vocab_size``). Such an id is never sampled, so
    it never stops a response; it is usually another model's (Llama 3's 128001 on a Qwen model)."""
    if not isinstance(sampling, SamplingParams):
        raise TypeError(
            f"the {engine} engine's generate takes a SamplingParams (got {type(sampling).__name__}): "
            f"SamplingParams(n=..., max_new_tokens=...), or SamplingParams.from_config(cfg.rollout)"
        )
    outside = [t for t in sampling.stop_token_ids if t >= vocab_size]
    if outside:   # a config's mistake (rollout.stop_token_ids): the CLI's exit 2
        raise UserInputError(
            f"SamplingParams.stop_token_ids {outside} are outside the {engine} engine's vocabulary of "
            f"{vocab_size} tokens (ids 0..{vocab_size - 1}): the model never samples them, so they would never "
            f"stop a response. Take the ids from this model's tokenizer (tokenizer.convert_tokens_to_ids) for "
            f"rollout.stop_token_ids, or drop them"
        )


def error_completions(reason: str, n: int, version: int) -> list[Completion]:
    return [Completion(response_ids=[], logprobs=[], finish_reason="error", policy_version=version, error=reason)
            for _ in range(n)]


@dataclass(frozen=True)
class DecodeHooks:
    """What a streaming caller hears from inside one ``generate`` call (the native engine's).

    ``on_group(i, completions)``: request i's n completions, as soon as its last one finishes,
    instead of only when the whole call returns. ``between_steps()``: called before every decode
    step; it may call ``update_weights``, so sequences still decoding continue under the new
    weights and their later tokens carry the new version (a partial rollout). That needs one
    decode worker: with several, the others would read weights while they are copied.
    """

    on_group: Callable[[int, list[Completion]], None] | None = None
    between_steps: Callable[[], None] | None = None


@runtime_checkable
class Engine(Protocol):
    """A rollout engine: generates responses, holds its own copy of the policy weights."""

    policy_version: int

    def generate(self, requests: Sequence[RequestLike], sampling: SamplingParams) -> list[list[Completion]]:
        """For each request, its ``sampling.n`` completions (in request order)."""
        ...

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]], version: int) -> None:
        """Copy new policy weights in (HF parameter names, e.g. ``model.named_parameters()``)."""
        ...


@dataclass(frozen=True)
class EngineOptions:
    """Engine settings that are not per-call sampling parameters (same for every backend).

    ``device`` / ``dtype`` None: those of the model's parameters. ``max_model_len`` None: the
    model's ``max_position_embeddings`` (no limit for a model without one, as Bloom). ``seed``
    seeds the engine's own generator, which gives unseeded requests their seeds (so whole runs
    are reproducible). ``threads``: CPU decode workers of the native engine (None:
    ``torch.get_num_threads()``). ``pack_weights``: the native engine's oneDNN matmuls keep their
    weights in oneDNN's blocked layout (20-25% faster decode matmuls on CPU, one more copy of the
    weights); None: when that copy is at most ``PACK_WEIGHTS_AUTO_MAX_BYTES``.
    """

    PACK_WEIGHTS_AUTO_MAX_BYTES: ClassVar[int] = 64 * 2**20

    max_batch_size: int = 512
    threads: int | None = None
    max_model_len: int | None = None
    max_prefill_tokens: int = 8192
    compile: bool = False
    seed: int = 0
    device: str | torch.device | None = None
    dtype: torch.dtype | None = None
    pack_weights: bool | None = None

    def __post_init__(self) -> None:
        # build_engine(..., max_model_len=0) used to leave every prompt "too long", a negative one
        # failed in arange, dtype="bfloat16" failed inside torch.empty: say which field, and why
        problems = _coerce_fields(self, ints=("max_batch_size", "max_prefill_tokens", "seed"),
                                  optional_ints=("threads", "max_model_len"), bools=("compile",))
        if isinstance(self.dtype, str):
            named = getattr(torch, self.dtype, None)
            if isinstance(named, torch.dtype) and named.is_floating_point:
                object.__setattr__(self, "dtype", named)
        if self.dtype is not None and not isinstance(self.dtype, torch.dtype):
            problems.append(f"dtype must be a torch dtype (torch.bfloat16) or its name ('bfloat16'), or None for "
                            f"the model's (got {self.dtype!r})")
        if self.pack_weights is not None and not isinstance(self.pack_weights, bool):
            problems.append(f"pack_weights must be True, False or None (got {self.pack_weights!r})")
        if not problems:
            for name, low in (("max_batch_size", 1), ("max_prefill_tokens", 1), ("seed", 0), ("threads", 1),
                              ("max_model_len", 2)):
                value = getattr(self, name)
                if value is not None and value < low:
                    optional = " or None" if name in ("threads", "max_model_len") else ""
                    problems.append(f"{name} must be >= {low}{optional} (got {value})")
        if problems:
            raise ValueError("invalid EngineOptions: " + "; ".join(problems))
