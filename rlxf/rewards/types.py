"""The records of reward scoring: what a verifier sees, what it returns, what the trainer gets.

    RewardInput ──verifier──▶ RewardResult (one per verifier) ──weighted sum──▶ ScoredSample

All of them are plain dataclasses that convert to and from JSON (the reward server's wire
format), so the same records flow in-process, through worker processes and over HTTP.
"""

from __future__ import annotations

import math
import sys
import traceback
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from rlxf.types import Prompt, Trajectory

FailureKind = Literal["error", "timeout", "crash"]


@dataclass
class RewardInput:
    """One response to score, with everything a verifier may need.

    ``ground_truth`` is whatever the dataset put there: an answer string (math, arithmetic),
    test cases (code), a reasoning-gym entry ``{question, answer, metadata}``, a rubric.
    """

    prompt: str                   # the prompt text as the policy saw it (chat template applied)
    response: str                 # the policy's response text
    ground_truth: Any = None      # reference answer / tests / entry; must be JSON for remote scoring
    metadata: dict[str, Any] = field(default_factory=dict)  # the prompt's metadata, passed through
    response_tokens: int | None = None  # |y|: tokens of the longest model turn (the response, single-turn): overlong shaping
    max_new_tokens: int | None = None   # L_max: the rollout's length limit
    uid: str = ""                 # the prompt's uid (logs, and matching remote results)

    @classmethod
    def from_trajectory(cls, trajectory: Trajectory, max_new_tokens: int | None = None) -> RewardInput:
        """The scoring view of a rollout (``rlxf.types.Trajectory``)."""
        return cls.from_prompt(trajectory.prompt, trajectory.response_text,
                               response_tokens=trajectory.longest_turn, max_new_tokens=max_new_tokens)

    @classmethod
    def from_prompt(cls, prompt: Prompt, response: str, *, response_tokens: int | None = None,
                    max_new_tokens: int | None = None) -> RewardInput:
        """The scoring view of one response to an ``rlxf.types.Prompt``."""
        return cls(prompt=prompt.prompt_text, response=response, ground_truth=prompt.ground_truth,
                   metadata=dict(prompt.metadata), response_tokens=response_tokens,
                   max_new_tokens=max_new_tokens, uid=prompt.uid)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RewardInput:
        return cls(**data)


@dataclass
class RewardResult:
    """What one verifier says about one response.

    ``score`` is the verifier's own scale (1.0 = correct for the checkers). ``error`` is set when
    the *verifier* failed (bad ground truth, judge reply without a score...), not when the
    response is wrong: a wrong answer is a score, not an error. A result with an error counts
    as ``reward.error_score`` in the sum. Put ``metrics["correct"]`` (1.0 / 0.0) to decide
    accuracy explicitly; otherwise accuracy is ``score >= 1``.
    """

    score: float
    metrics: dict[str, float] = field(default_factory=dict)
    error: str | None = None

    @classmethod
    def failed(cls, message: str) -> RewardResult:
        return cls(0.0, {}, message)


def describe_exception(e: BaseException, frames: int = 4) -> str:
    """A verifier's exception as a ``VerifierFailure`` message: ``Type: message`` and the last
    ``frames`` frames of its traceback, so the line of the reward function that raised is in
    samples.jsonl and in the error that stops a run whose rewards keep failing."""
    head = f"{type(e).__name__}: {e}"[:500]
    tb = "".join(traceback.format_list(traceback.extract_tb(e.__traceback__)[-frames:]))
    return f"{head}\nTraceback (last {frames} frames):\n{tb.rstrip()}" if tb else head


@dataclass
class VerifierFailure:
    """Why a verifier has no score for a sample."""

    kind: FailureKind             # error: raised / reported one; timeout: exceeded reward.timeout_s;
    message: str                  # crash: its worker process died


@dataclass
class ScoredSample:
    """The reward of one sample, for the trainer.

    ``reward = Σ_i w_i · s_i`` over the verifiers, where s_i is ``scores[name_i]`` (the error
    score for a failed verifier). ``correct`` comes from the ``reward.accuracy`` verifier;
    None if that verifier failed on this sample.
    """

    reward: float                 # r: the weighted sum, what the advantages are computed from
    scores: dict[str, float]      # s_i per verifier name (error score where it failed)
    correct: bool | None          # task accuracy from the accuracy verifier
    failures: dict[str, VerifierFailure] = field(default_factory=dict)  # per verifier name
    metrics: dict[str, float] = field(default_factory=dict)  # "<verifier>/<metric>" extras
    uid: str = ""                 # the input's uid, echoed

    @property
    def error(self) -> str | None:
        """All failures as one line (``Trajectory.reward_error``), None if there were none."""
        if not self.failures:
            return None
        return "; ".join(f"{name}: {f.kind}: {f.message}" for name, f in self.failures.items())

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> ScoredSample:
        """The sample ``to_json`` wrote (a reward server's answer); ValueError naming the first
        field that is not what it writes: a string or a NaN reward from a broken or foreign
        server would otherwise reach the advantages."""
        if not isinstance(data, dict):
            raise ValueError(f"a result is a {type(data).__name__}, not an object")
        if not _finite(data.get("reward")):
            raise ValueError(f"reward is {data.get('reward')!r:.80}, not a finite number")
        for key in ("scores", "metrics"):
            values = data.get(key, {} if key == "metrics" else None)
            if not isinstance(values, dict):
                raise ValueError(f"{key} is {values!r:.80}, not an object of name -> number")
            for name, value in values.items():  # a metric is only logged: NaN is allowed there
                if not (_finite(value) if key == "scores" else _number(value)):
                    raise ValueError(f"{key}[{name!r}] is {value!r:.80}, not a {'finite ' * (key == 'scores')}number")
        if data.get("correct") not in (True, False, None):
            raise ValueError(f"correct is {data.get('correct')!r:.80}, not true, false or null")
        if not isinstance(data.get("uid", ""), str):
            raise ValueError(f"uid is {data.get('uid')!r:.80}, not a string")
        failures = data.get("failures", {})
        if not isinstance(failures, dict) or not all(
                isinstance(f, dict) and f.keys() == {"kind", "message"} and f["kind"] in ("error", "timeout", "crash")
                and isinstance(f["message"], str) for f in failures.values()):
            raise ValueError(f"failures {failures!r:.120} is not an object of {{kind, message}} records")
        return cls(reward=float(data["reward"]), scores={k: float(v) for k, v in data["scores"].items()},
                   correct=data.get("correct"), failures={k: VerifierFailure(**v) for k, v in failures.items()},
                   metrics={k: float(v) for k, v in data.get("metrics", {}).items()}, uid=data.get("uid", ""))


def _number(value: Any) -> bool:
    """A JSON number, not a bool, within a float's range (an integer of 400 digits is JSON too, and
    ``float()`` of it raised OverflowError out of the reward)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return isinstance(value, float) or abs(value) <= _FLOAT_MAX_INT


_FLOAT_MAX_INT = int(sys.float_info.max)


def _finite(value: Any) -> bool:
    return _number(value) and math.isfinite(value)


def batch_metrics(samples: list[ScoredSample], prefix: str = "reward/") -> dict[str, float]:
    """Flat metrics of a scored batch, for the logger.

    ``reward/mean``, ``reward/accuracy`` (over samples with a verdict), ``reward/errors``
    (samples with any failure), ``reward/timeouts``, ``reward/crashes``, and per verifier
    ``reward/<name>/mean`` (over the samples it scored) and ``reward/<name>/failures``.
    """
    n = len(samples)
    if n == 0:
        return {f"{prefix}count": 0.0}
    out: dict[str, float] = {f"{prefix}count": float(n),
                             f"{prefix}mean": sum(s.reward for s in samples) / n}
    verdicts = [s.correct for s in samples if s.correct is not None]
    if verdicts:
        out[f"{prefix}accuracy"] = sum(verdicts) / len(verdicts)
    failures = [f for s in samples for f in s.failures.values()]
    out[f"{prefix}errors"] = float(sum(1 for s in samples if s.failures))
    out[f"{prefix}timeouts"] = float(sum(1 for f in failures if f.kind == "timeout"))
    out[f"{prefix}crashes"] = float(sum(1 for f in failures if f.kind == "crash"))
    names = list(dict.fromkeys(name for s in samples for name in s.scores))
    for name in names:
        ok = [s.scores[name] for s in samples if name in s.scores and name not in s.failures]
        if ok:
            out[f"{prefix}{name}/mean"] = sum(ok) / len(ok)
        out[f"{prefix}{name}/failures"] = float(sum(1 for s in samples if name in s.failures))
    extra: dict[str, list[float]] = {}
    for s in samples:
        for key, value in s.metrics.items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                extra.setdefault(key, []).append(float(value))
    for key, values in extra.items():
        out[f"{prefix}{key}"] = sum(values) / len(values)
    return out
