"""Per-source verifiers for a data mixture: each sample is scored by its own source's reward.

    reward = build_run_reward(cfg)    # LocalReward, or SourceRoutedReward when a source has verifiers

A mixture of, say, arithmetic and a reasoning-gym dataset needs a numeric check for one and
the dataset's own scorer for the other. ``data.sources[].verifiers`` gives a source its own
list; its samples (told apart by the source name that starts their uid) are scored by a
``LocalReward`` built from that list with the rest of ``reward`` unchanged, all other samples
by ``reward.verifiers``. Each sample's reward and verdict come from its source's verifiers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rlxf.config.data import DataConfig
from rlxf.config.reward import RewardConfig
from rlxf.errors import close_all, close_during
from rlxf.rewards.base import run_sync
from rlxf.rewards.scorer import RewardFunction, build_reward, gather_all
from rlxf.rewards.types import RewardInput, ScoredSample

if TYPE_CHECKING:
    from rlxf.config import Config


def source_reward_configs(data: DataConfig, reward: RewardConfig) -> dict[str, RewardConfig]:
    """``reward`` with each mixture source's own verifiers (the sources that set them), by name.
    The accuracy verifier of a source is the first of its list."""
    return {s.label: reward.model_copy(update={"verifiers": list(s.verifiers), "accuracy": None})
            for s in data.sources if s.verifiers}


class SourceRoutedReward:
    """Scores each sample with its source's reward function, or ``default``."""

    def __init__(self, default: RewardFunction, by_source: dict[str, RewardFunction]):
        self.default = default
        self.by_source = by_source
        self.names = list(dict.fromkeys([*default.names, *(n for r in by_source.values() for n in r.names)]))
        self.accuracy = default.accuracy

    async def ascore(self, batch: Sequence[RewardInput]) -> list[ScoredSample]:
        parts: dict[str | None, list[int]] = {}
        for j, x in enumerate(batch):
            source = x.uid.split(":", 1)[0]  # rlxf.types.source_of, without importing torch here
            parts.setdefault(source if source in self.by_source else None, []).append(j)
        scorers = [self.by_source[s] if s is not None else self.default for s in parts]
        results = await gather_all([fn.ascore([batch[j] for j in idx]) for fn, idx in zip(scorers, parts.values())])
        out: list[ScoredSample | None] = [None] * len(batch)
        for idx, scored in zip(parts.values(), results):
            for j, sample in zip(idx, scored, strict=True):
                out[j] = sample
        return out  # type: ignore[return-value]  # every index was filled by its part

    def score(self, batch: Sequence[RewardInput]) -> list[ScoredSample]:
        return run_sync(self.ascore(batch))

    @property
    def problem(self) -> str | None:
        """Why some source's scorer cannot score any more (the reward server's /health reports
        it), named by its source (``reward.verifiers``: the default's), or None."""
        named = [("reward.verifiers", self.default), *((f"source {s}", fn) for s, fn in self.by_source.items())]
        for name, fn in named:
            problem = getattr(fn, "problem", None)
            if problem:
                return f"{name}: {problem}"
        return None

    def close(self) -> None:
        """Close every source's scorer, also after one fails (its worker processes must not outlive
        the run); the first failure is raised."""
        close_all(fn.close for fn in (self.default, *self.by_source.values()))


def build_run_reward(cfg: Config) -> RewardFunction:
    """The run's reward function: ``build_reward(cfg.reward)``, routed per source when some
    mixture source has its own verifiers."""
    per_source = source_reward_configs(cfg.data, cfg.reward)
    default = build_reward(cfg.reward)
    if not per_source:
        return default
    built: dict[str, RewardFunction] = {}
    try:
        for name, rc in per_source.items():
            built[name] = build_reward(rc)
    except BaseException as e:
        close_during(e, lambda: close_all(fn.close for fn in (default, *built.values())), "closing the built rewards")
        raise
    return SourceRoutedReward(default, built)
