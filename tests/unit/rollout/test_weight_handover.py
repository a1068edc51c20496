"""WeightHandover: weights sent from another thread while the engine generates are loaded
between two decode steps (newest version only), at once when idle, after the call when the
call cannot be hooked."""

from __future__ import annotations

import threading
from dataclasses import replace

import torch

from rlxf.models import load_model
from rlxf.rollout import EngineOptions, GenerationRequest, SamplingParams, build_engine
from rlxf.rollout.handover import WeightHandover


class _Paused:
    """An engine whose next call, before its first decode step (before it starts, when the call
    has no hooks), sets ``decoding`` and waits for ``until()``: weights then arrive mid-call."""

    def __init__(self, engine, until):
        self.engine, self.until, self.decoding = engine, until, threading.Event()

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def _pause(self) -> None:
        if not self.decoding.is_set():
            self.decoding.set()
            self.until()

    def generate(self, requests, sampling, hooks=None):
        if hooks is None:
            self._pause()
            return self.engine.generate(requests, sampling)

        def between_steps():
            self._pause()
            hooks.between_steps()

        return self.engine.generate(requests, sampling, replace(hooks, between_steps=between_steps))


def _perturbed(model, seed: int) -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(name, p.detach() + 0.05 * torch.randn(p.shape, generator=g)) for name, p in model.named_parameters()]


def _generate_while_sending(handover, requests, sampling, updates):
    """Run ``handover.generate`` in a thread; once it is decoding, send ``updates`` from this one."""
    out = []
    call = threading.Thread(target=lambda: out.append(handover.generate(requests, sampling)))
    call.start()
    assert handover.engine.decoding.wait(timeout=60)
    for weights, version in updates:
        handover.update_weights(weights, version)
    call.join(timeout=120)
    return out[0]


def test_weights_sent_mid_call_reach_the_sequences_still_decoding(nano_model_dir):
    model = load_model(nano_model_dir)
    requests = [GenerationRequest([5, 6, 7], seed=1), GenerationRequest([8, 9], seed=2)]
    sampling = SamplingParams(n=2, max_new_tokens=10, ignore_eos=True)
    before = build_engine("native", model, options=EngineOptions(threads=1)).generate(requests, sampling)

    handover = WeightHandover(build_engine("native", model, options=EngineOptions(threads=1)))
    handover.engine = _Paused(handover.engine, lambda: handover.wait_for(2, timeout=60))
    after = _generate_while_sending(handover, requests, sampling, [(_perturbed(model, 1), 1),
                                                                   (_perturbed(model, 2), 2)])
    assert handover.policy_version == 2
    for old_group, new_group in zip(before, after):
        for old, new in zip(old_group, new_group):
            # prefill sampled the first token under version 0; the rest under the newest sent
            assert new.versions() == [0] + [2] * 9 and new.policy_version == 0
            assert new.response_ids[0] == old.response_ids[0] and new.logprobs[0] == old.logprobs[0]
            assert new.logprobs[1:] != old.logprobs[1:]


def test_an_idle_engine_loads_at_once_and_an_unhooked_call_after_it_ends(nano_model_dir):
    model = load_model(nano_model_dir)
    handover = WeightHandover(build_engine("native", model, options=EngineOptions(threads=2)))
    handover.update_weights(_perturbed(model, 1), 1)
    assert handover.policy_version == 1 and handover.received == 1

    # two decode workers: the other one would read the weights while they are copied
    handover.engine = _Paused(handover.engine, lambda: handover.wait_for(2, timeout=60))
    requests = [GenerationRequest([5, 6, 7], seed=1), GenerationRequest([8, 9], seed=2)]
    groups = _generate_while_sending(handover, requests, SamplingParams(n=2, max_new_tokens=6, ignore_eos=True),
                                     [(_perturbed(model, 2), 2)])
    assert {v for group in groups for c in group for v in c.versions()} == {1}
    assert handover.policy_version == 2  # loaded when the call ended
