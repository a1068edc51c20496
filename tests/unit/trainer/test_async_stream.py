"""The async consumer: the staleness bound holds whatever order groups finish in, the buffer
stays bounded, and the loop runs in async mode through the placement interface only."""

from __future__ import annotations

import json

import hypothesis.strategies as st
from hypothesis import HealthCheck, given, settings
from test_placement_seam import RecordingPlacement, _config

from rlxf.config.algorithm import AlgorithmConfig
from rlxf.data import PromptSampler
from rlxf.rollout import SamplingParams
from rlxf.rollout.stream import GroupStream, InlineStream
from rlxf.run_dir import RunDir
from rlxf.trainer.loop import train
from rlxf.trainer.seeds import derive_seed
from rlxf.trainer.stream import AsyncBatches, Draw, Draws, ReadyGroup, StalenessBuffer
from rlxf.trainer.timer import PhaseTimer
from rlxf.types import Prompt, Trajectory


def test_the_buffer_drops_what_is_too_old_and_takes_in_submission_order():
    buf = StalenessBuffer(groups_per_step=2, max_staleness=1)
    assert buf.room() == 4
    buf.submitted(4)
    for order, version in [(3, 2), (0, 0), (2, 1), (1, 0)]:
        buf.arrived(ReadyGroup(order=order, version=version, item=order))
    # the trainer at version 2 (training step 3): versions 0 are 2 behind, more than k = 1
    batch = buf.take(trainer_version=2)
    assert [g.order for g in batch] == [2, 3] and buf.dropped_stale == 2
    assert buf.outstanding == 0 and buf.room() == 4
    assert buf.take(trainer_version=2) is None


def _group(versions: list[int], rewards: list[float]) -> list[Trajectory]:
    prompt = Prompt(uid="p", prompt_ids=[1], prompt_text="")
    return [Trajectory(prompt=prompt, group=0, response_ids=[1] * len(versions), response_text="",
                       rollout_logprobs=[0.0] * len(versions), loss_mask=[1] * len(versions),
                       policy_versions=versions, finish_reason="stop", reward=r) for r in rewards]


def test_draws_replace_a_round_as_it_completes_and_a_part_drawn_round_holds_no_room_forever():
    prompts = [Prompt(uid=f"p{i}", prompt_ids=[1], prompt_text="") for i in range(20)]
    buffer = StalenessBuffer(groups_per_step=2, max_staleness=0)
    draws = Draws(PromptSampler(prompts, seed=0, shuffle=False), buffer, rounds=3, seed=0)
    first = draws.requests()
    assert [r.group for r in first] == [0, 1] and [r.prompt.uid for r in first] == ["p0", "p1"]
    assert first[1].seed == derive_seed(0, 1, 0, 1)  # sync's seed for step 1, round 0, prompt 1
    draws.arrived(0, _group([0], [1.0, 1.0]), informative=False)  # agrees: dropped, its room held
    assert draws.requests() == [] and buffer.room() == 0  # not replaced before its round is complete
    draws.arrived(1, _group([0], [0.0, 1.0]), informative=True)
    (again,) = draws.requests()  # the round is complete: one prompt of round 1
    assert (again.prompt.uid, again.seed) == ("p2", derive_seed(0, 1, 1, 0))
    draws.arrived(2, _group([0], [0.0, 1.0]), informative=True)
    assert [g.order for g in draws.take(trainer_version=0)] == [1, 2] and not draws.out
    # step 2: one group comes back from weights a version behind (an engine slow to load
    # them) and is dropped as stale, which frees room for one prompt of step 3
    draws.requests()
    draws.arrived(3, _group([0], [0.0, 1.0]), informative=True)
    draws.arrived(4, _group([1], [0.0, 1.0]), informative=True)
    assert draws.take(trainer_version=1) is None and buffer.dropped_stale == 1
    (part,) = draws.requests()
    assert draws.out[part.group][1] == Draw(step=3, round=0, index=0)
    draws.arrived(part.group, _group([1], [1.0, 1.0]), informative=False)
    # the part drawn of step 3's round 0 is complete: replaced now, or nothing would be in flight
    (replacement,) = draws.requests()
    assert draws.out[replacement.group][1] == Draw(step=3, round=1, index=0)


class ScriptedStream(GroupStream):
    """An engine whose groups finish when a hypothesis script says: each ready() call hands back
    a drawn subset of what is in flight. A group's tokens carry every version from the one its
    request met in the engine to the current one (a partial rollout spanning them)."""

    def __init__(self, data, n: int):
        self.data, self.n = data, n
        self.version = 0
        self.inflight: list[tuple[object, int]] = []
        self.submitted: list = []   # every request, in order

    def submit(self, requests, sampling):
        self.inflight += [(r, self.version) for r in requests]
        self.submitted += requests

    def ready(self, timeout=None):
        if not self.inflight:
            assert timeout == 0, "the trainer waits with nothing in flight: it would wait forever"
            return []
        picks = self.data.draw(st.lists(st.sampled_from(range(len(self.inflight))), unique=True,
                                        min_size=0 if timeout == 0 else 1))
        out = []
        for i in sorted(picks, reverse=True):
            request, start = self.inflight.pop(i)
            versions = list(range(start, self.version + 1))
            out.append((request.group, [
                Trajectory(prompt=request.prompt, group=request.group, response_ids=[1] * len(versions),
                           response_text="", rollout_logprobs=[0.0] * len(versions),
                           loss_mask=[1] * len(versions), policy_versions=versions, finish_reason="stop")
                for _ in range(self.n)]))
        return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), k=st.integers(0, 3), per_step=st.integers(1, 4), dynamic=st.booleans())
def test_no_group_older_than_k_is_ever_trained_on(data, k, per_step, dynamic):
    n = 2
    stream = ScriptedStream(data, n)

    def score(group, max_new_tokens):  # rewards drawn per group: some groups agree (dynamic sampling drops them)
        agree = data.draw(st.booleans())
        for j, t in enumerate(group):
            t.reward = 1.0 if agree else float(j % 2)
        return {}

    prompts = [Prompt(uid=f"p{i}", prompt_ids=[1, 2], prompt_text="") for i in range(7)]
    batches = AsyncBatches(stream, score, PromptSampler(prompts, seed=0), SamplingParams(n=n),
                           AlgorithmConfig(dynamic_sampling=dynamic, max_sampling_rounds=3),
                           prompts_per_step=per_step, max_staleness=k, seed=0)
    dropped = 0.0
    for step in range(1, 7):
        stream.version = step - 1  # the weights of step - 1 reached the engine
        trajs, metrics = batches.next(step, PhaseTimer())
        oldest = [min(t.policy_versions) for t in trajs]
        assert all(step - 1 - v <= k for v in oldest), (step, oldest)
        groups = sorted({t.group for t in trajs})
        drawn = int(metrics.get("sampling/prompts_drawn", per_step))  # groups numbered over all the step sampled
        assert set(groups) <= set(range(drawn)) and len(trajs) == len(groups) * n
        if not dynamic:
            assert groups == list(range(per_step))
        else:  # only groups whose rewards differ are trained on, unless none does
            differs = [len({u.reward for u in trajs if u.group == g}) > 1 for g in groups]
            assert all(differs) or not any(differs)
        assert metrics["async/staleness_max"] <= k
        assert 0 <= batches.buffer.outstanding <= batches.buffer.capacity
        held = sum(t.drops for t in batches.in_flight.tallies.values())  # dropped, to be replaced
        assert len(stream.inflight) + len(batches.buffer.waiting) == len(batches.in_flight.out)
        assert len(batches.in_flight.out) + held == batches.buffer.outstanding
        dropped += metrics["async/dropped_stale"]
    assert dropped == batches.buffer.dropped_stale


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), k=st.integers(0, 2), per_step=st.integers(1, 3), at=st.integers(1, 4), dynamic=st.booleans())
def test_a_resume_trains_on_every_prompt_out_at_the_checkpoint_and_loses_none(data, k, per_step, at, dynamic):
    """Checkpoint after step ``at``, resume with a new engine, sampler and buffer: the prompts
    out at the checkpoint (in flight or waiting) are submitted first, with their seeds, and the
    rounds open then (dropped groups waiting to be replaced) go on; over the whole run no
    prompt is trained on twice, and (without dynamic sampling's drops) every prompt drawn is
    trained on, dropped as stale (counted), or still out at the end."""
    n, steps = 2, 6
    prompts = [Prompt(uid=f"p{i}", prompt_ids=[1, 2], prompt_text="") for i in range(300)]  # no epoch ends

    def score(group, max_new_tokens):  # with dynamic sampling, some groups agree
        agree = dynamic and data.draw(st.booleans())
        for j, t in enumerate(group):
            t.reward = 1.0 if agree else float(j % 2)
        return {}

    def run(stream, sampler):
        return AsyncBatches(stream, score, sampler, SamplingParams(n=n),
                            AlgorithmConfig(dynamic_sampling=dynamic, max_sampling_rounds=3),
                            prompts_per_step=per_step, max_staleness=k, seed=0)

    stream, sampler = ScriptedStream(data, n), PromptSampler(prompts, seed=0)
    batches, trained, stale = run(stream, sampler), [], 0.0
    for step in range(1, steps + 1):
        if step == at + 1:  # the checkpoint (saved after step `at`), then a new process
            saved = {"sampler": sampler.state_dict(), "in_flight": batches.in_flight.state_dict()}
            by_order = {r.group: (r.prompt.uid, r.seed) for r in stream.submitted}
            out = [by_order[order] for order in sorted(batches.in_flight.out)]
            stream, sampler = ScriptedStream(data, n), PromptSampler(prompts, seed=0)
            sampler.load_state_dict(saved["sampler"])
            batches = run(stream, sampler)
            batches.in_flight.load_state_dict(saved["in_flight"])
        stream.version = step - 1
        trajs, metrics = batches.next(step, PhaseTimer())
        if step == at + 1:  # sent again first, as they were
            assert [(r.prompt.uid, r.seed) for r in stream.submitted][: len(out)] == out
        trained += [t.prompt.uid for t in trajs[::n]]
        stale += metrics["async/dropped_stale"]
        # a round holding dropped groups' room is waiting for more of its groups: none is held for ever
        assert all(t.pending > 0 for t in batches.in_flight.tallies.values() if t.drops)
    drawn = [p.uid for p in PromptSampler(prompts, seed=0).next_batch(sampler.consumed)]
    still_out = {batches.in_flight.out[order][0].uid for order in batches.in_flight.out}
    assert len(trained) == len(set(trained)) and not set(trained) & still_out
    assert set(trained) | still_out <= set(drawn)
    if not dynamic:
        assert len(trained) == steps * per_step
        assert len(drawn) - len(trained) - len(still_out) == stale


def test_the_loop_runs_async_through_the_placement_interface(tmp_path, tokenizer_for_tests):
    """k = 1 over an inline stream (which generates whatever is queued when asked for groups)."""
    cfg = _config(tmp_path, "rollout.mode=async", "rollout.max_staleness=1")
    fake = RecordingPlacement(tokenizer_for_tests)
    assert isinstance(fake.stream(), InlineStream)
    run = RunDir.open(cfg.run.output_dir, cfg.run.name)
    train(cfg, run, fake)
    updates = [c[2] for c in fake.calls if c[0] == "update"]
    assert updates == [1, 2, 3, 4]
    # step 1 asked for steps 1 and 2 at once (k + 1 steps of prompts), in one generate call
    first = next(c for c in fake.calls if c[0] == "generate")
    assert first[1] == 2 * cfg.train.prompts_per_step
    rows = [json.loads(line) for line in run.metrics.read_text().splitlines()]
    # step 2 trains on step 1's second half (version 0); steps 3 and 4 find their prompts
    # queued and generate them from the newest weights
    assert [r["async/staleness_max"] for r in rows] == [0.0, 1.0, 0.0, 0.0]
    assert all(r["async/dropped_stale"] == 0 for r in rows)


def test_explain_shows_the_engine_process_of_async_mode(tmp_path):
    from rlxf.config.explain import RoleMemory, placement_table

    roles = [RoleMemory("actor", weights=100), RoleMemory("engine", weights=7)]
    rows = placement_table(_config(tmp_path, "rollout.mode=async", "rollout.max_staleness=2"), roles)
    assert [(r[0], r[3]) for r in rows] == [("this process", 100), ("engine process (async, max_staleness=2)", 7)]
    assert "engine" not in rows[0][1]


def test_an_empty_response_does_not_make_its_fresh_group_stale():
    """An empty response has no token, so no version; counted as version 0 it made a group
    sampled with the newest weights look as old as the first and dropped it as stale."""
    prompts = [Prompt(uid=f"p{i}", prompt_ids=[1], prompt_text="") for i in range(4)]
    buffer = StalenessBuffer(groups_per_step=1, max_staleness=1)
    draws = Draws(PromptSampler(prompts, seed=0, shuffle=False), buffer, rounds=1, seed=0)
    draws.requests()
    group = _group([5, 5], [1.0]) + _group([], [0.0])
    draws.arrived(0, group, informative=True)
    assert [g.version for g in buffer.waiting] == [5]
    assert [g.order for g in draws.take(trainer_version=6)] == [0] and buffer.dropped_stale == 0
