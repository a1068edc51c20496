"""Partial rollouts: weights swapped between decode steps reach the sequences still decoding,
and every token says which weights sampled it."""

from __future__ import annotations

import torch

from rlxf.models import load_model
from rlxf.rollout import DecodeHooks, EngineOptions, GenerationRequest, SamplingParams, build_engine


def test_new_weights_mid_generation_tag_later_tokens_with_the_new_version(nano_model_dir):
    model = load_model(nano_model_dir)
    engine = build_engine("native", model, options=EngineOptions(threads=1, seed=0))
    requests = [GenerationRequest([5, 6, 7], seed=1), GenerationRequest([8, 9], seed=2)]
    sampling = SamplingParams(n=2, max_new_tokens=12, ignore_eos=True)
    before = engine.generate(requests, sampling)

    perturbed = [(name, p.detach() + 0.05 * torch.randn_like(p)) for name, p in model.named_parameters()]
    steps, finished = [], []

    def between_steps():
        steps.append(engine.policy_version)
        if len(steps) == 4:  # three decode steps done: the first 4 tokens came from version 0
            engine.update_weights(perturbed, version=1)

    after = engine.generate(requests, sampling, DecodeHooks(on_group=lambda i, g: finished.append(i),
                                                            between_steps=between_steps))
    assert sorted(finished) == [0, 1]  # each request heard of once, when its last sample finished
    for old_group, new_group in zip(before, after):
        for old, new in zip(old_group, new_group):
            assert new.token_versions == [0] * 4 + [1] * 8 and new.versions() == new.token_versions
            assert new.policy_version == 0  # the oldest token's version
            # the first 4 tokens are those of the unchanged weights; later ones were sampled by the new
            assert new.response_ids[:4] == old.response_ids[:4] and new.logprobs[:4] == old.logprobs[:4]
            assert new.logprobs[4:] != old.logprobs[4:]
