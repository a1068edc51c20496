"""Rollout: engines that sample responses (with their log-probs) from the policy.

    from rlxf.rollout import SamplingParams, build_engine
    engine = build_engine("native", model, tokenizer)            # or "hf", the reference
    groups = engine.generate(prompt_id_lists, SamplingParams(n=8, temperature=1.0))
    engine.update_weights(model.named_parameters(), version=1)   # after each optimizer step

Importing this package imports no backend; ``build_engine`` imports the one it builds.
"""

from rlxf.rollout.base import DecodeHooks, Engine, EngineOptions, GenerationRequest, SamplingParams
from rlxf.rollout.gap import logprob_gap
from rlxf.rollout.registry import BACKENDS, build_engine, build_engine_from_config

__all__ = [
    "BACKENDS", "DecodeHooks", "Engine", "EngineOptions", "GenerationRequest", "SamplingParams",
    "build_engine", "build_engine_from_config", "logprob_gap",
]
