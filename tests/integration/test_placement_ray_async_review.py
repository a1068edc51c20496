"""rollout.mode=async on Ray engine actors (``_EngineActorStream``): an engine that dies with
several calls in flight, and the calls still in flight when the run ends. Stand-in engine
actors on a local Ray (2 CPUs): no model is loaded."""

from __future__ import annotations

import json
import time

import pytest
from test_placement_ray import _engines_from, local_ray  # noqa: F401 - a fixture, and a bare RayPlacement

ray = pytest.importorskip("ray")

from rlxf.placement.ray import _EngineActorStream  # noqa: E402
from rlxf.rollout import SamplingParams  # noqa: E402
from rlxf.rollout.stream import GroupRequest  # noqa: E402


@ray.remote(num_cpus=0, concurrency_groups={"weights": 1})
class _StandIn:
    """An engine actor whose generate calls each take ``seconds`` and sample nothing; it notes
    the calls it started, and its close writes them to ``record``."""

    def __init__(self, seconds: float, record: str | None = None):
        self.seconds, self.record, self.started = seconds, record, []

    def generate(self, prompts, seeds, sampling, first_group, version):
        self.started.append(seeds[0])
        time.sleep(self.seconds)
        return []

    @ray.method(concurrency_group="weights")
    def update_weights(self, weights, version: int) -> int:
        return version

    @ray.method(concurrency_group="weights")
    def calls_started(self) -> list[int]:
        return list(self.started)

    def close(self) -> None:
        with open(self.record, "w") as f:
            json.dump(self.started, f)


def _submit(stream: _EngineActorStream, seeds: list[int]) -> None:
    for seed in seeds:   # one generate call each
        stream.submit([GroupRequest(None, seed, seed)], SamplingParams(n=1))


def test_an_engine_dead_with_two_calls_in_flight_is_replaced_once(local_ray):  # noqa: F811
    """k >= 1 sends each step's prompts as a call of its own: an engine killed with two calls in
    flight failed both, and each failure replaced it, the second replacing the first's
    replacement: two restarts counted for one death (ray.max_restarts reached k + 1 times as
    fast), and a second engine started (a GPU's worth, where engines have one)."""
    placement = _engines_from(_StandIn.remote(0.0), _StandIn.remote(0.0))
    placement._engines = [_StandIn.remote(60.0)]
    ray.get(placement._engines[0].__ray_ready__.remote())
    stream = _EngineActorStream(placement)
    _submit(stream, [1, 2])
    ray.kill(placement._engines[0])
    back = []
    while stream.calls:
        back += stream.ready()
    assert sorted(back) == [(1, []), (2, [])]   # both retried, on the one replacement
    assert placement.stats()["ray/engine_restarts"] == 1.0 and placement.restarts == 1


def test_closing_cancels_the_calls_no_step_will_take(local_ray, tmp_path):  # noqa: F811
    """At the end of an async run the next steps' calls are still queued on the engines; the
    engine's close waited behind every one of them (CLOSE_TIMEOUT_S, 30 s, per engine, the
    actors holding their CPUs and GPUs meanwhile, and a run that failed said so only after).
    Now the queued calls are cancelled: the engine closes once the call it is running ends."""
    record = tmp_path / "started.json"
    placement = _engines_from()
    engine = _StandIn.remote(3.0, str(record))
    placement._engines, placement._learners, placement._scorers, placement.reward = [engine], [], [], None
    placement._started_ray = False
    placement.cfg.ray.mode = "disaggregated"
    ray.get(engine.__ray_ready__.remote())
    stream = placement.stream()
    _submit(stream, [1, 2, 3])
    while not ray.get(engine.calls_started.remote()):   # the first call runs, the others wait behind it
        time.sleep(0.05)
    placement.close()
    assert json.loads(record.read_text()) == [1]   # the two queued calls never started
    assert ray.is_initialized()   # the Ray it joined is left running
