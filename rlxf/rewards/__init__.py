"""Evaluation: verifiers, the code sandbox, the reward pool and the reward function.

    from rlxf.rewards import RewardInput, build_reward, batch_metrics

    scorer = build_reward(cfg.reward)           # local verifiers, or `rlxf serve-reward` by URL
    samples = scorer.score([RewardInput(prompt, response, ground_truth)])
    samples[0].reward, samples[0].scores, samples[0].correct

Verifier kinds (``reward.verifiers[].type``): math, exact, numeric (``answers``), format,
overlong (``format``), reasoning_gym, code (``code`` + ``sandbox``), reward_model, judge,
custom. The HTTP server lives in ``rlxf.rewards.server`` and is imported only by
``rlxf serve-reward`` (it needs ``rlxf[serve]``).
"""

from rlxf.rewards.base import AsyncVerifier, SyncVerifier, Verifier, build_verifier, run_sync
from rlxf.rewards.pool import VerifierPool
from rlxf.rewards.routed import SourceRoutedReward, build_run_reward
from rlxf.rewards.scorer import LocalReward, RemoteReward, RewardFunction, build_reward, combine
from rlxf.rewards.types import (
    RewardInput,
    RewardResult,
    ScoredSample,
    VerifierFailure,
    batch_metrics,
)

__all__ = [
    "AsyncVerifier", "LocalReward", "RemoteReward", "RewardFunction", "RewardInput", "RewardResult",
    "ScoredSample", "SourceRoutedReward", "SyncVerifier", "Verifier", "VerifierFailure", "VerifierPool", "batch_metrics",
    "build_reward", "build_run_reward", "build_verifier", "combine", "run_sync",
]
