"""A Bradley–Terry reward model as a verifier: ``r(x, y)``, the value head's output at the
last token of prompt + response (``rlxf.models.sequence_scores``), batched.

Under the Bradley–Terry model P(y_w ≻ y_l | x) = σ(r(x, y_w) − r(x, y_l)), so only
differences of scores mean anything, and their offset and spread are whatever training left.
Before the score is mixed with 0/1 checkers or penalties it is put on a known scale
(``score_transform``): ``normalize: standard`` gives (r − μ) / σ with μ, σ the mean and
standard deviation of the RM's own scores on its training responses (``reward_stats.json``,
written by ``rlxf rm`` next to the weights), ``normalize: sigmoid`` gives σ(r); ``clip: [lo,
hi]`` then bounds it, so a policy cannot collect an unbounded reward from responses the RM
extrapolates to wildly (one of the cheapest guards against over-optimisation). The statistics
are fixed, not running: a score means the same at step 1 and step 1000, and a resumed run
needs no normaliser state.

The response is scored as the RM was trained: its tokens followed by eos
(``rlxf.data.templates.encode_response``), the score read at that eos. Prompt and response are
tokenised separately (the prompt text already holds the chat template) and cut as ``rlxf rm``
cut its training pairs: when the model directory belongs to an ``rlxf rm`` run, its config.yaml's
``data.max_prompt_len`` and ``data.max_response_len`` keep the prompt's last and the response's
last tokens (the eos included), so a pair gets the ids training gave it. Then the prompt is cut
from the left when the pair still exceeds ``max_length``, and a response longer than that keeps
its end (a warning at load names a ``max_length`` shorter than the two training limits). The
prompt gets the tokenizer's special tokens (a BOS) exactly when
``rlxf.data.templates.encode_prompts`` gave them to the policy and to the RM's training prompts:
when it is raw text, not when it ends with the chat template's generation prompt (the template
holds its own). Special-token text in the response
(``<|im_end|>`` spelled out by ordinary tokens, which is all a policy's decoded text can hold)
stays ordinary text: parsed, it would let a policy end its turn early or forge a new one in
what the RM reads.

One forward runs at a time (the model is shared), on the verifier's own thread. A call the
scorer gives up on (past ``reward.timeout_s``) starts no forward: one still queued never runs, and
one running a batch larger than ``batch_size`` stops before its next chunk. A forward already
running stops at the start of its next layer (a hook before each layer of the model's layer lists
checks whether its call was abandoned; a layer itself cannot be interrupted), so the next call
waits at most one layer for it, not the rest of a forward nobody reads.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlxf.rewards.base import run_sync
from rlxf.rewards.types import RewardInput, RewardResult

log = logging.getLogger(__name__)
STATS_FILE = "reward_stats.json"


class _Abandoned(Exception):
    """Raised by a layer's pre-hook to end the forward of a call nobody waits for any more."""


@dataclass(frozen=True)
class ScoreStats:
    """Mean μ and standard deviation σ of a reward model's scores on its training responses."""

    mean: float
    std: float
    count: int

    def save(self, model_dir: Path) -> None:
        (Path(model_dir) / STATS_FILE).write_text(json.dumps(
            {"mean": self.mean, "std": self.std, "count": self.count,
             "about": "scores of this reward model on the chosen and rejected responses of its training pairs"},
            indent=1) + "\n")

    @classmethod
    def load(cls, model_dir: Path) -> ScoreStats:
        path = Path(model_dir) / STATS_FILE
        if not path.is_file():
            raise FileNotFoundError(
                f"normalize: standard needs {path}, which `rlxf rm` writes next to the weights of every "
                f"checkpoint it saves; this reward model has none. Re-save it with `rlxf rm`, or use "
                f"normalize: none / sigmoid")
        d = json.loads(path.read_text())
        return cls(float(d["mean"]), float(d["std"]), int(d["count"]))


def training_limits(path: str | Path) -> tuple[int | None, int | None]:
    """(``data.max_prompt_len``, ``data.max_response_len``) that cut the training pairs of the
    reward model at ``path``, from the config.yaml of the ``rlxf rm`` run it belongs to;
    (None, None) for a model outside such a run (a loose directory, a hub id)."""
    import yaml  # noqa: PLC0415

    from rlxf.models.paths import ModelPathError, resolve_model_dir  # noqa: PLC0415
    from rlxf.run_dir import recorded_command  # noqa: PLC0415

    try:
        run = resolve_model_dir(path).run
    except ModelPathError:
        return None, None
    if run is None or recorded_command(run) != "rm" or not (run / "config.yaml").is_file():
        return None, None
    try:
        data = (yaml.safe_load((run / "config.yaml").read_text()) or {}).get("data") or {}
    except (OSError, yaml.YAMLError, AttributeError) as e:
        log.warning("reward model %s: cannot read the length limits of its training run from %s (%s); scoring "
                    "with max_length alone", path, run / "config.yaml", e)
        return None, None
    prompt, response = data.get("max_prompt_len"), data.get("max_response_len")
    return (prompt if isinstance(prompt, int) else None), (response if isinstance(response, int) else None)


def score_transform(raw: float, normalize: str = "none", stats: ScoreStats | None = None,
                    clip: tuple[float, float] | None = None) -> float:
    """The reward a raw RM score ``r`` becomes: normalised, then clipped.

    ``none``: r; ``sigmoid``: 1 / (1 + e^(−r)); ``standard``: (r − μ) / σ with ``stats``
    (σ floored at 1e-6: an RM that scores everything alike must not divide by zero). ``clip``
    (lo, hi) then bounds the result to [lo, hi].

    >>> score_transform(3.0, "standard", ScoreStats(mean=1.0, std=4.0, count=8), clip=(-0.25, 0.25))
    0.25
    """
    if normalize == "sigmoid":
        value = 1.0 / (1.0 + math.exp(-raw)) if raw >= 0 else math.exp(raw) / (1.0 + math.exp(raw))
    elif normalize == "standard":
        if stats is None:
            raise ValueError("normalize: standard needs the reward model's score statistics")
        value = (raw - stats.mean) / max(stats.std, 1e-6)
    elif normalize == "none":
        value = raw
    else:
        raise ValueError(f"unknown normalize {normalize!r}; allowed: none, sigmoid, standard")
    if clip is not None:
        value = min(max(value, clip[0]), clip[1])
    return value


class RewardModelVerifier:
    """Scores responses in batches of ``batch_size`` with a ``rlxf.models.ValueModel``."""

    self_limited = False
    concurrency = 1               # one forward at a time: the model is shared

    def __init__(self, name: str, model: Any, tokenizer: Any, *, batch_size: int = 16, max_length: int = 2048,
                 normalize: str = "none", stats: ScoreStats | None = None,
                 clip: tuple[float, float] | None = None, max_prompt_len: int | None = None,
                 max_response_len: int | None = None):
        if normalize == "standard" and stats is None:
            raise ValueError("normalize: standard needs the reward model's score statistics (stats)")
        if tokenizer.eos_token_id is None:
            raise ValueError(f"reward model {name!r}: its tokenizer has no eos token, the token its score is read "
                             f"at; set eos_token in the model's tokenizer_config.json")
        self.name = name
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.max_length = max_length
        self.max_prompt_len = max_prompt_len      # the training pairs' limits (None: not known / none)
        self.max_response_len = max_response_len
        if max_prompt_len and max_response_len and max_prompt_len + max_response_len > max_length:
            log.warning("reward model %r was trained on prompts of up to %d and responses of up to %d tokens, but "
                        "its max_length is %d: longer pairs are cut more than in training (prompt first); set "
                        "max_length to %d to score them as trained", name, max_prompt_len, max_response_len,
                        max_length, max_prompt_len + max_response_len)
        self.normalize = normalize
        self.stats = stats
        self.clip = clip
        self._lock = threading.Lock()         # held during a forward
        self._thread = ThreadPoolExecutor(1, thread_name_prefix=f"rlxf-rm-{name}")
        self._abandoned: threading.Event | None = None   # the running forward's call gave up when set
        from torch.nn import ModuleList  # noqa: PLC0415 - torch only once a model is in hand

        self._hooks = [layer.register_forward_pre_hook(self._stop_if_abandoned)
                       for layers in self.model.modules() if isinstance(layers, ModuleList) for layer in layers]
        from rlxf.data.templates import generation_prompt  # noqa: PLC0415 - the data layer's templates

        self._generation_prompt = generation_prompt(tokenizer) if getattr(tokenizer, "chat_template", None) else ""

    @classmethod
    def from_config(cls, cfg: Any) -> RewardModelVerifier:
        from rlxf.models import ValueModel, load_tokenizer  # noqa: PLC0415 - torch + transformers
        from rlxf.models.loading import check_vocab  # noqa: PLC0415
        from rlxf.models.paths import resolve_model_dir  # noqa: PLC0415

        model = ValueModel.from_pretrained(cfg.path, device=cfg.device)
        tokenizer = load_tokenizer(cfg.path)
        check_vocab(model.trunk, tokenizer, model_what=f"reward model {cfg.path}")
        stats = ScoreStats.load(resolve_model_dir(cfg.path).model) if cfg.normalize == "standard" else None
        max_prompt_len, max_response_len = training_limits(cfg.path)
        return cls(cfg.label, model, tokenizer, batch_size=cfg.batch_size,
                   max_length=cfg.max_length, normalize=cfg.normalize, stats=stats,
                   clip=tuple(cfg.clip) if cfg.clip is not None else None,
                   max_prompt_len=max_prompt_len, max_response_len=max_response_len)

    def _ids(self, x: RewardInput) -> tuple[list[int], list[int]]:
        """(prompt ids, response ids + eos), the layout of the RM's training pairs."""
        templated = bool(self._generation_prompt) and x.prompt.rstrip().endswith(self._generation_prompt)
        prompt = self.tokenizer(x.prompt, add_special_tokens=not templated)["input_ids"] or [self._fallback_token()]
        from rlxf.data.templates import encode_response  # noqa: PLC0415

        response = encode_response(self.tokenizer, x.response)   # special-token text stays text
        if self.max_prompt_len:  # as rlxf rm cut its training pairs (rlxf.data.sources.fit_length)
            prompt = prompt[-self.max_prompt_len:]
        if self.max_response_len:
            response = response[-self.max_response_len:]
        if len(response) >= self.max_length:  # keep the response's end and one prompt token
            response = response[-(self.max_length - 1):]
        room = self.max_length - len(response)
        return prompt[-room:], response

    def _stop_if_abandoned(self, module: Any, args: Any) -> None:
        """Pre-hook of each layer: ends the running forward once its call was abandoned."""
        if self._abandoned is not None and self._abandoned.is_set():
            raise _Abandoned

    def _fallback_token(self) -> int:
        tok = self.tokenizer
        return tok.bos_token_id if tok.bos_token_id is not None else tok.eos_token_id

    def score_batch(self, inputs: list[RewardInput], *,
                    abandoned: threading.Event | None = None) -> list[RewardResult]:
        """Scores of ``inputs`` (one forward per ``batch_size`` chunk); blocking.

        ``abandoned``: set by a caller that gave up waiting; no forward starts after it is set,
        and the results so far (which nobody reads) are returned.
        """
        import torch  # noqa: PLC0415

        from rlxf.models import sequence_scores  # noqa: PLC0415

        out: list[RewardResult] = []
        for k in range(0, len(inputs), self.batch_size):
            pairs = [self._ids(x) for x in inputs[k:k + self.batch_size]]
            with self._lock, torch.no_grad():
                if abandoned is not None and abandoned.is_set():
                    return out
                self._abandoned = abandoned
                try:
                    scores = sequence_scores(self.model, [p for p, _ in pairs], [r for _, r in pairs])
                except _Abandoned:
                    return out
                finally:
                    self._abandoned = None
            for raw in scores.tolist():
                value = score_transform(raw, self.normalize, self.stats, self.clip)
                out.append(RewardResult(value, {"raw": raw}))
        return out

    async def ascore_batch(self, inputs: list[RewardInput]) -> list[RewardResult]:
        """``score_batch`` on the verifier's thread (the forward must not block the event loop);
        cancelled (``reward.timeout_s``), it starts no further forward."""
        abandoned = threading.Event()
        call = functools.partial(self.score_batch, inputs, abandoned=abandoned)
        try:  # cancelling the future also drops the call from the thread's queue if it has not started
            return await asyncio.get_running_loop().run_in_executor(self._thread, call)
        except asyncio.CancelledError:
            abandoned.set()
            raise

    def score(self, x: RewardInput) -> RewardResult:
        return run_sync(self.ascore_batch([x]))[0]

    def close(self) -> None:
        self._thread.shutdown(wait=True, cancel_futures=True)  # a running forward still uses the model
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
