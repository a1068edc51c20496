"""Warnings a user needs when RL does not learn, read from each step's metrics.

    diagnostics = Diagnostics(group_baseline=registry.needs("advantage", cfg.algorithm.advantage).groups)
    diagnostics.replay(records)                # --resume: the metrics.jsonl of the steps done
    for step ...:
        diagnostics.observe(step, metrics)     # logs on the "rlxf" logger, each warning once

Each check looks at a few steps, not one (a single bad batch is noise), and fires at most
once per run (per eval source for the accuracy check), so a long run does not drown its log:

- **no signal**: most groups had equal rewards (every advantage 0 under a group baseline: not
  checked for the estimators without one, ``group_baseline``) over the last steps; when
  most of those groups are one wrong response sampled n times, the warning says the policy has
  become deterministic (it sharpened faster than it learned) instead of that the task is too hard;
- **engine/trainer gap**: the engine's sampling log-probs and the trainer's log π_old of the
  same tokens disagree (bf16 vs fp32, a temperature mismatch, a missed weight sync);
- **clipping**: a large fraction of tokens hit the PPO clip (steps too large for the trust region);
- **one answer to every question**: most of a step's samples, over its different prompts, are
  the same response (the policy learned which answer is most often right, not the task);
- **forgetting / not learning**: held-out accuracy stayed below its first value (``eval.at_start``'s:
  the model RL started from) for several evals.

The metric names are the loop's (``rlxf.trainer``): ``groups/zero_variance_frac`` (the
actor), ``groups/identical_frac``, ``sampling/kept_frac`` and ``sampling/identical_frac``
(dynamic sampling), ``rollout/logprob_gap_mean``,
``policy/clipfrac_*``, ``response/same_frac`` and ``eval/accuracy`` or ``eval/<source>/accuracy``.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class DiagnosticThresholds:
    """When each warning fires. The defaults are loose: they flag runs that are clearly off."""

    zero_variance_frac: float = 0.8   # mean fraction of signal-less groups over `window` steps
    window: int = 10                  # steps averaged for the zero-variance check
    logprob_gap: float = 0.05         # mean |log π_rollout - log π_old| per token; ~1e-6 on CPU fp32
    clip_frac: float = 0.2            # fraction of tokens clipped (low + high + dual)
    patience: int = 3                 # consecutive steps over the gap / clip thresholds
    eval_patience: int = 3            # consecutive evals below the first one
    same_response_frac: float = 0.75  # mean share of samples that are one response, over `window` steps

    def __post_init__(self) -> None:
        for name in ("window", "patience", "eval_patience"):
            if getattr(self, name) < 1:
                raise ValueError(f"DiagnosticThresholds.{name} must be >= 1, got {getattr(self, name)!r}")
        for name in ("zero_variance_frac", "same_response_frac"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"DiagnosticThresholds.{name} must be in (0, 1], got {getattr(self, name)!r}")


@dataclass
class Diagnostics:
    """Watches one run's step metrics and warns (once per kind) when RL is unlikely to learn."""

    thresholds: DiagnosticThresholds = field(default_factory=DiagnosticThresholds)
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("rlxf"))
    # whether the advantage estimator's baseline is the group's (grpo, rloo, ...): a group with equal
    # rewards then has zero advantage. gae's critic and reinforce_pp's batch baseline give its samples
    # advantages all the same (and with rollout.n 1 every group is one sample): no "no signal" warning
    group_baseline: bool = True
    _zero_var: deque = field(init=False, repr=False)
    _same: deque = field(init=False, repr=False)
    _identical: deque = field(init=False, repr=False)
    _streaks: dict[str, int] = field(init=False, repr=False, default_factory=dict)
    _eval_start: dict[str, float] = field(init=False, repr=False, default_factory=dict)
    _warned: set[str] = field(init=False, repr=False, default_factory=set)

    def __post_init__(self) -> None:
        self._zero_var = deque(maxlen=self.thresholds.window)
        self._same = deque(maxlen=self.thresholds.window)
        self._identical = deque(maxlen=self.thresholds.window)

    def observe(self, step: int, metrics: Mapping[str, float]) -> list[str]:
        """Read one step's metrics; log and return the warnings issued now (usually none)."""
        issued = self._check(step, metrics)
        for msg in issued:
            self.logger.warning(msg)
        return issued

    def replay(self, records: Iterable[Mapping[str, Any]]) -> None:
        """Read, without logging, the metrics.jsonl records of the steps a resumed run has done:
        the windows, streaks and first evaluation are then those of the run that was not
        interrupted, and a warning it gave is not given again."""
        for record in records:
            metrics = {}
            for key, value in record.items():
                if key == "step":
                    continue
                try:  # NaN/inf are written as strings (metrics.sinks)
                    metrics[key] = float(value)
                except (TypeError, ValueError):
                    continue
            step = record.get("step")
            if isinstance(step, int) and not isinstance(step, bool):   # a record written by hand may lack one
                self._check(step, metrics)

    def _check(self, step: int, metrics: Mapping[str, float]) -> list[str]:
        return [msg for msg in (self._no_signal(step, metrics), self._gap(step, metrics),
                                self._clipping(step, metrics), self._one_answer(step, metrics),
                                *self._evals(step, metrics)) if msg]

    def _once(self, key: str, message: str) -> str | None:
        if key in self._warned:
            return None
        self._warned.add(key)
        return message

    def _window_mean(self, window: deque, value: float) -> float | None:
        """Append ``value``; the mean of the window once it is full, else None."""
        window.append(value)
        return sum(window) / len(window) if len(window) == window.maxlen else None

    def _streak(self, key: str, over: bool) -> int:
        self._streaks[key] = self._streaks.get(key, 0) + 1 if over else 0
        return self._streaks[key]

    def _no_signal(self, step: int, m: Mapping[str, float]) -> str | None:
        if not self.group_baseline:
            return None
        # dynamic sampling drops zero-variance groups before the actor sees them: count those too
        fracs = [m["groups/zero_variance_frac"]] if "groups/zero_variance_frac" in m else []
        if "sampling/kept_frac" in m:
            fracs.append(1.0 - m["sampling/kept_frac"])
        if not fracs:
            return None
        t = self.thresholds
        mean = self._window_mean(self._zero_var, max(fracs))
        # dynamic sampling hands the actor only groups that disagree: read what it sampled
        key = "sampling/identical_frac" if "sampling/identical_frac" in m else "groups/identical_frac"
        identical = self._window_mean(self._identical, m[key]) if key in m else None
        if mean is None or mean < t.zero_variance_frac:
            return None
        if identical is not None and identical >= mean / 2:
            # most groups without signal are one wrong response n times: not a task too hard, a policy
            # that stopped exploring (efficacy.py's number_sequence at lr auto, benchmarks/README.md)
            return self._once("deterministic", (
                f"step {step}: over the last {t.window} steps {mean:.0%} of groups had equal rewards "
                f"for every sample, and {identical:.0%} sampled one and the same wrong response every "
                f"time (groups/identical_frac): the policy has become deterministic on prompts it has "
                f"not solved, so sampling explores nothing and RL has stopped learning. It sharpened "
                f"faster than it learned: lower train.optim.lr, raise train.prompts_per_step (each step "
                f"averages more prompts), or add algorithm.kl_coef to stay near the start."))
        return self._once("no_signal", (
            f"step {step}: over the last {t.window} steps {mean:.0%} of groups had equal rewards for "
            f"every sample (zero advantage, nothing to learn from). The task is too hard (or too easy) "
            f"for the policy: start from a model that is sometimes right (SFT first), make the task "
            f"easier, raise rollout.n, or set algorithm.dynamic_sampling: true with more "
            f"algorithm.max_sampling_rounds to refill batches with informative groups."))

    def _gap(self, step: int, m: Mapping[str, float]) -> str | None:
        if "rollout/logprob_gap_mean" not in m:
            return None
        gap = m["rollout/logprob_gap_mean"]
        t = self.thresholds
        if self._streak("gap", gap > t.logprob_gap) < t.patience:
            return None
        return self._once("gap", (
            f"step {step}: the engine's sampling log-probs and the trainer's differ by {gap:.3g} per "
            f"token on average (rollout/logprob_gap_mean) for {t.patience} steps; the same weights "
            f"should agree to ~1e-3 or better. Check that rollout and trainer use the same dtype and "
            f"rollout.temperature, and that weights reach the engine every step; "
            f"algorithm.off_policy: tis (or mis) corrects a small, known mismatch."))

    def _clipping(self, step: int, m: Mapping[str, float]) -> str | None:
        keys = [k for k in m if k.startswith("policy/clipfrac")]
        if not keys:
            return None
        frac = sum(m[k] for k in keys)
        t = self.thresholds
        if self._streak("clip", frac > t.clip_frac) < t.patience:
            return None
        return self._once("clip", (
            f"step {step}: {frac:.0%} of tokens hit the PPO clip ({' + '.join(sorted(keys))}) for "
            f"{t.patience} steps: each update moves the policy further than the trust region allows. "
            f"Lower train.optim.lr, use fewer train.ppo_epochs or a larger train.mini_batch_size."))

    def _one_answer(self, step: int, m: Mapping[str, float]) -> str | None:
        if "response/same_frac" not in m:
            return None
        t = self.thresholds
        mean = self._window_mean(self._same, m["response/same_frac"])
        if mean is None or mean < t.same_response_frac:
            return None
        return self._once("one_answer", (
            f"step {step}: over the last {t.window} steps {mean:.0%} of the samples, over different "
            f"prompts, were one and the same response (response/same_frac): the policy gives one "
            f"answer to most questions. That is what RL learns from a model that knows which answer "
            f"is most often right but not the task: the common answer earns reward wherever it "
            f"happens to be right, and is reinforced everywhere. Check samples.jsonl; start from a "
            f"model right more often than the most common answer is (SFT longer), or add "
            f"algorithm.kl_coef to stay near the start."))

    def _evals(self, step: int, m: Mapping[str, float]) -> list[str]:
        """One warning for the accuracies that fell at this step: in a mixture a source that is
        forgotten pulls eval/accuracy and eval/source_mean_accuracy down with it, and three
        warnings with the same advice said it three times."""
        t = self.thresholds
        fell = []
        for key in sorted(k for k in m if k.startswith("eval/") and k.endswith("accuracy")):
            acc = m[key]
            start = self._eval_start.setdefault(key, acc)
            if self._streak(key, acc < start) >= t.eval_patience and key not in self._warned:
                self._warned.add(key)
                fell.append(f"{key} ({start:.1%}) is now {acc:.1%}")
        if not fell:
            return []
        return [(
            f"step {step}: held-out accuracy has been below its first value for {t.eval_patience} evaluations: "
            f"{', '.join(fell)}. RL is not improving the skill, or is erasing it. Lower train.optim.lr or add "
            f"warm-up, add algorithm.kl_coef to stay near the start, and mix prompts of the skills to keep into "
            f"the data; check samples.jsonl for what the reward actually pays for.")]
