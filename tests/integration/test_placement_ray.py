"""`run.placement: ray` on a local Ray instance (2 CPUs): the same weights as `local`, resume
across placements, and actors killed for real."""

from __future__ import annotations

import json
import threading

import pytest
import torch
from rl_helpers import metrics, write_config
from safetensors.torch import load_file

ray = pytest.importorskip("ray")

from rlxf.config import load_config  # noqa: E402
from rlxf.placement import build, run_training  # noqa: E402
from rlxf.placement.ray import LearnerLost, RayPlacement, _Engine  # noqa: E402
from rlxf.rollout import SamplingParams  # noqa: E402
from rlxf.rollout.stream import GroupRequest  # noqa: E402
from rlxf.run_dir import RunDir  # noqa: E402


@pytest.fixture(scope="module")
def local_ray():
    """One Ray instance for the module (placements join it instead of starting their own)."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture
def one_thread():
    """Actors get one torch thread each (ray.*_cpus=1): local runs too, so the arithmetic matches."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, nano_model_dir):
    """The directory of the `local` run (3 steps, one thread) that Ray runs are compared with."""
    root = tmp_path_factory.mktemp("local")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _train(_cfg(root, nano_model_dir, "local"))
    finally:
        torch.set_num_threads(threads)
    return root


def _cfg(tmp_path, model_dir, name, *overrides):
    # a constant lr: runs below stop after 2 steps and resume for a third, which a cosine schedule's may not
    path = write_config(tmp_path / name, model_dir, train={"steps": 3, "prompts_per_step": 4, "micro_batch_size": 8,
                                                           "optim": {"lr": 3e-3, "schedule": "constant"}},
                        checkpoint={"every": 1, "keep_last": 3}, run={"name": name, "output_dir": str(tmp_path / "runs")})
    return load_config(path, list(overrides))


def _weights(tmp_path, name, step=3):
    return load_file(tmp_path / "runs" / name / "checkpoints" / f"step_{step}" / "model" / "model.safetensors")


def _train(cfg, resume=False):
    return run_training(cfg, RunDir.open(cfg.run.output_dir, cfg.run.name, resume=resume), resume=resume)


def test_ray_placements_learn_what_local_learns_and_resume_across_placements(
        tmp_path, nano_model_dir, local_run, local_ray, one_thread):
    _train(_cfg(tmp_path, nano_model_dir, "colocated", "run.placement=ray"))
    _train(_cfg(tmp_path, nano_model_dir, "split", "run.placement=ray", "ray.mode=disaggregated",
                "ray.engine_cpus=0.5", "ray.reward_actors=2", "ray.reward_cpus=0.25", "train.steps=2"))
    assert metrics(tmp_path / "runs" / "split")[-1]["ray/reward_restarts"] == 0  # scored by the reward actors
    _train(_cfg(tmp_path, nano_model_dir, "split"), resume=True)  # ray -> local
    _train(_cfg(tmp_path, nano_model_dir, "back", "train.steps=2"))
    _train(_cfg(tmp_path, nano_model_dir, "back", "run.placement=ray", "ray.mode=disaggregated"), resume=True)

    local = _weights(local_run, "local")
    base = load_file(nano_model_dir / "model.safetensors")
    assert any(not torch.equal(local[k], base[k]) for k in local)  # it trained: the equalities are not vacuous
    for name in ("colocated", "split", "back"):
        other = _weights(tmp_path, name)
        assert local.keys() == other.keys()
        diff = max(float((local[k] - other[k]).abs().max()) for k in local)
        assert diff <= 1e-6, (name, diff)  # bit-identical on one CPU; a tolerance for other BLAS builds


def test_a_time_budget_anneals_the_lr_on_ray_as_it_does_locally(tmp_path, nano_model_dir, local_ray, one_thread,
                                                                 monkeypatch):
    """The driver's clock (faked: 10 s a reading) tells the learner actor how much of
    train.max_seconds is spent: the same lr step by step as a local run, down the cosine."""
    import itertools

    from rlxf.trainer.state import TrainClock

    lrs = {}
    for name, placement in (("local", "local"), ("ray", "ray")):
        ticks = itertools.count()
        monkeypatch.setattr(TrainClock, "seconds", lambda self, ticks=ticks: self.before + 10.0 * next(ticks))
        _train(_cfg(tmp_path, nano_model_dir, name, f"run.placement={placement}", "train.steps=1000",
                    "train.max_seconds=40", "train.optim.schedule=cosine", "checkpoint.every=0"))
        lrs[name] = [r["lr"] for r in metrics(tmp_path / "runs" / name)]
    assert lrs["ray"] == lrs["local"] and 2 < len(lrs["ray"]) < 1000
    assert lrs["ray"][0] == pytest.approx(3e-3) and lrs["ray"] == sorted(lrs["ray"], reverse=True)
    assert lrs["ray"][-1] < 0.2 * 3e-3


@ray.remote(num_cpus=0)
class _DiesJoining:
    """An engine that answers alive, then dies as it joins the broadcast group, as one does when
    a kill lands after the alive check (ray.kill does not wait): the other members waited
    broadcast.TIMEOUT (120 s) for it, and the sync failed (DistStoreError), now and then."""

    def alive(self) -> bool:
        return True

    def join(self, *args) -> None:
        import os

        os._exit(1)

    def joined(self, timeout: float) -> bool:
        return False


def test_a_killed_engine_is_replaced_and_its_requests_retried(tmp_path, nano_model_dir, local_ray, one_thread):
    """Killed while generating: replaced, given the weights through the object store, retried.
    Killed before a broadcast (weight_sync=collective): replaced, the group rebuilt, resent; a
    replacement that dies as the group is rebuilt is replaced in turn."""
    cfg = _cfg(tmp_path, nano_model_dir, "kill", "run.placement=ray", "ray.mode=disaggregated", "ray.engines=2",
               "ray.engine_cpus=0.5", "ray.learner_cpus=0.5", "ray.weight_sync=collective")
    placement = build(cfg)
    try:
        assert isinstance(placement, RayPlacement)
        from rlxf.data import build_prompt_data

        prompts = build_prompt_data(cfg.data, placement.tokenizer, seed=0).train[:4]
        sampling = SamplingParams(n=2, max_new_tokens=6, temperature=1.0)
        placement.sync_weights(5)
        before = placement.generate(prompts, [1, 2, 3, 4], sampling)
        ray.kill(placement._engines[1])
        after = placement.generate(prompts, [1, 2, 3, 4], sampling)
        assert placement.restarts == 1
        assert [t.response_ids for t in after] == [t.response_ids for t in before]
        assert {v for t in after for v in t.policy_versions} == {5}  # the new engine got the current weights
        assert [t.group for t in after] == [g for g in range(4) for _ in range(2)]

        new_engine, stand_in = placement._new_engine, [_DiesJoining.options(**placement._options).remote()]
        placement._new_engine = lambda: stand_in.pop() if stand_in else new_engine()   # engine 0's first replacement
        ray.kill(placement._engines[0])   # its death may land only once it is joining the rebuilt group, too
        placement.sync_weights(6)
        assert placement.restarts == 3 and not stand_in   # engine 0, then the replacement that died joining
        again = placement.generate(prompts, [1, 2, 3, 4], sampling)
        assert [t.response_ids for t in again] == [t.response_ids for t in before]
        assert {v for t in again for v in t.policy_versions} == {6}   # both engines, in the rebuilt group

        ray.kill(placement._learners[0])
        with pytest.raises(LearnerLost, match="--resume"):
            placement.save(tmp_path / "nowhere")
    finally:
        placement.close()
    assert ray.is_initialized()  # it joined the module's Ray instance, so it leaves it running


def test_a_killed_reward_actor_is_replaced_and_its_samples_scored_again(tmp_path, nano_model_dir, local_ray,
                                                                       one_thread):
    cfg = _cfg(tmp_path, nano_model_dir, "rewardkill", "run.placement=ray", "ray.mode=disaggregated",
               "ray.engine_cpus=0.5", "ray.learner_cpus=0.5", "ray.reward_actors=2", "ray.reward_cpus=0.5")
    placement = build(cfg)
    try:
        from rlxf.data import build_prompt_data

        prompts = build_prompt_data(cfg.data, placement.tokenizer, seed=0).train[:4]
        trajs = placement.generate(prompts, [1, 2, 3, 4], SamplingParams(n=2, max_new_tokens=6, temperature=1.0))
        first = placement.score(trajs, 6)
        verdicts = [(t.reward, t.scores) for t in trajs]
        ray.kill(placement._scorers[1])
        for t in trajs:
            t.reward, t.scores = 0.0, {}
        assert placement.score(trajs, 6) == first
        assert [(t.reward, t.scores) for t in trajs] == verdicts
        assert placement.stats() == {"ray/engine_restarts": 0.0, "ray/reward_restarts": 1.0}
    finally:
        placement.close()


def test_two_learner_ranks_train_what_one_trains_and_resume_under_one(tmp_path, nano_model_dir, local_run,
                                                                       local_ray, one_thread):
    """ray.learners=2 (gloo): the weights of one learner, within float tolerance (sums run in
    another order). FSDP colocated (the engine in rank 0's actor, weights gathered for it), and
    its checkpoint resumed by one local learner; DDP disaggregated, the engine fed by broadcast."""
    halves = ("run.placement=ray", "ray.learner_cpus=0.5", "ray.engine_cpus=0.5", "ray.learners=2")
    _train(_cfg(tmp_path, nano_model_dir, "fsdp", *halves, "ray.learner_strategy=fsdp", "train.steps=2"))
    _train(_cfg(tmp_path, nano_model_dir, "fsdp"), resume=True)  # 2 FSDP ranks -> one local learner
    _train(_cfg(tmp_path, nano_model_dir, "ddp", *halves, "ray.mode=disaggregated", "ray.learner_strategy=ddp",
                "ray.weight_sync=collective"))

    one = _weights(local_run, "local")
    for name in ("fsdp", "ddp"):
        other = _weights(tmp_path, name)
        assert one.keys() == other.keys()
        diff = max(float((one[k] - other[k]).abs().max()) for k in one)
        assert diff <= 1e-5, (name, diff)
    # the engines sampled every step from the weights they were sent: what local sampled
    rows = {name: [json.loads(line) for line in (root / "runs" / name / "samples.jsonl").read_text().splitlines()]
            for root, name in ((local_run, "local"), (tmp_path, "fsdp"), (tmp_path, "ddp"))}
    assert len({r["step"] for r in rows["local"]}) == 3
    for name in ("fsdp", "ddp"):
        assert [r["response"] for r in rows[name]] == [r["response"] for r in rows["local"]], name


def test_async_mode_streams_from_engine_actors_within_the_staleness_bound(tmp_path, nano_model_dir, local_ray,
                                                                            one_thread):
    cfg = _cfg(tmp_path, nano_model_dir, "async", "run.placement=ray", "ray.mode=disaggregated", "rollout.mode=async",
               "rollout.max_staleness=1", "checkpoint.every=0")
    _train(cfg)
    rows = metrics(tmp_path / "runs" / "async")
    # step 1 sent steps 1 and 2's prompts at once: step 2 trains on version-0 samples, one behind
    assert [r["async/staleness_max"] for r in rows][:2] == [0.0, 1.0]
    assert all(r["async/staleness_max"] <= 1 and r["async/dropped_stale"] == 0 for r in rows)


class _PausedEngine(_Engine):
    """An engine actor whose generate call, before its first decode step, says so and waits
    (up to 2 minutes) until version 1 has been handed over: the weights then arrive mid-call."""

    def __init__(self, cfg, cpus):
        super().__init__(cfg, cpus)
        self.decoding = threading.Event()
        load = self.engine._load_pending   # WeightHandover's hook between decode steps

        def pause_then_load():
            if not self.decoding.is_set():
                self.decoding.set()
                self.engine.wait_for(1, timeout=120)
            load()

        self.engine._load_pending = pause_then_load

    @ray.method(concurrency_group="weights")
    def wait_decoding(self) -> bool:
        return self.decoding.wait(timeout=120)


def test_async_weights_reach_an_engine_actor_mid_call(tmp_path, nano_model_dir, local_ray, one_thread,
                                                      monkeypatch):
    """rollout.mode=async: weights synced while an engine actor decodes are loaded between two
    of its decode steps (a partial rollout): each sample's first token carries version 0, the
    rest version 1, and the experience the learner builds from them keeps both."""
    import rlxf.placement.ray as ray_placement

    monkeypatch.setattr(ray_placement, "_Engine", _PausedEngine)
    cfg = _cfg(tmp_path, nano_model_dir, "partial", "run.placement=ray", "ray.mode=disaggregated",
               "rollout.mode=async", "ray.learner_cpus=0.5", "ray.engine_cpus=0.5")
    placement = build(cfg)
    try:
        from rlxf.data import build_prompt_data

        prompts = build_prompt_data(cfg.data, placement.tokenizer, seed=0).train[:2]
        stream = placement.stream()
        stream.submit([GroupRequest(p, seed, g) for g, (p, seed) in enumerate(zip(prompts, [1, 2]))],
                      SamplingParams(n=2, max_new_tokens=16, ignore_eos=True))
        assert ray.get(placement._engines[0].wait_decoding.remote())
        placement.sync_weights(1)
        trajs = [t for _, group in stream.ready() for t in group]
        assert len(trajs) == 4 and all(t.policy_versions == [0] + [1] * 15 for t in trajs)
        placement.score(trajs, 16)
        exp, _ = placement.make_experience(trajs)
        assert exp.policy_versions.tolist() == [[0] + [1] * 15] * 4
    finally:
        placement.close()


def test_env_episodes_on_disaggregated_engines_train_as_local(tmp_path, nano_model_dir, local_ray, one_thread):
    """Multi-turn episodes run inside the engine actor (agent loop next to its engine), scored on the
    driver: the same trajectories, so the same weights, as the local placement; in async mode with
    k = 0 too (the engine actor's generate calls run the episodes while the learner trains)."""
    env = ["env={name: 'agentic_plugins:DigitsEnv', max_turns: 2, max_total_tokens: 96}", "rollout.max_new_tokens=4",
           "train.steps=2", "train.prompts_per_step=2", "logging.samples_fraction=1.0"]
    _train(_cfg(tmp_path, nano_model_dir, "env-local", *env))
    _train(_cfg(tmp_path, nano_model_dir, "env-split", *env, "run.placement=ray", "ray.mode=disaggregated"))
    _train(_cfg(tmp_path, nano_model_dir, "env-async", *env, "run.placement=ray", "ray.mode=disaggregated",
                "rollout.mode=async", "rollout.max_staleness=0"))
    local = _weights(tmp_path, "env-local", 2)
    base = load_file(nano_model_dir / "model.safetensors")
    assert any(not torch.equal(local[k], base[k]) for k in local)
    for name in ("env-split", "env-async"):
        other = _weights(tmp_path, name, 2)
        assert max(float((local[k] - other[k]).abs().max()) for k in local) <= 1e-6, name
    runs = tmp_path / "runs"
    samples = [(runs / name / "samples.jsonl").read_text() for name in ("env-local", "env-split", "env-async")]
    assert samples[0] == samples[1] == samples[2] and '"turns": 2' in samples[0]   # the episodes, step by step


def test_actors_the_cluster_cannot_place_are_named_instead_of_waited_for(tmp_path, nano_model_dir, local_ray,
                                                                          monkeypatch):
    """An engine asking for 8 CPUs of a 2-CPU cluster: the run waited forever, silently."""
    import rlxf.placement.ray as ray_placement

    real = ray_placement.RayPlacement._wait_placed

    def engines_get_3_s(self, role, handles):   # the learner, which can be placed, starts slowly on a busy machine
        if role != "learner":
            monkeypatch.setattr(ray_placement, "PLACE_TIMEOUT_S", 3.0)
        return real(self, role, handles)

    monkeypatch.setattr(ray_placement.RayPlacement, "_wait_placed", engines_get_3_s)
    cfg = _cfg(tmp_path, nano_model_dir, "too-big", "run.placement=ray", "ray.mode=disaggregated", "ray.engine_cpus=8")
    with pytest.raises(ray_placement.ActorsNotPlaced, match=r"1 of 1 engine and reward actors could not be placed.*"
                                                            r"engine_cpus=8"):
        ray_placement.RayPlacement(cfg)


def test_what_a_plugin_registers_is_known_in_every_actor(tmp_path, nano_model_dir, local_ray, one_thread):
    """An estimator a config's plugin registers exists only in processes that import the plugin:
    the learner, engine and reward actors import the config's plugins as the driver does."""
    path = write_config(tmp_path, nano_model_dir, plugins=["rl_plugins"],
                        algorithm={"advantage": "grpo_from_a_plugin_for_tests"}, train={"steps": 1},
                        checkpoint={"every": 0}, run={"name": "plugin", "output_dir": str(tmp_path / "runs")})
    # one of each actor: a learner rank, an engine, a reward actor
    cfg = load_config(path, ["run.placement=ray", "ray.mode=disaggregated", "ray.engine_cpus=0.5",
                             "ray.learner_cpus=0.5", "ray.reward_actors=1", "ray.reward_cpus=0.5"])
    _train(cfg)
    assert [m["step"] for m in metrics(tmp_path / "runs" / "plugin")] == [1]


@ray.remote(num_cpus=0)
class _Raiser:
    def fail(self, kind: str):
        from rlxf.errors import UserInputError
        from rlxf.trainer.checkpoint import CheckpointDamaged

        raise {"input": UserInputError, "damaged": CheckpointDamaged, "other": KeyError}[kind]("what to do")


def test_an_rlxf_error_raised_in_an_actor_reaches_the_driver_as_itself(local_ray):
    """A UserInputError raised in an actor (a learner refusing a resume, a bad data file) printed
    Ray's whole traceback as its message; a CheckpointDamaged exited 1 as a RayTaskError."""
    from ray.exceptions import RayTaskError

    from rlxf.errors import UserInputError
    from rlxf.placement.ray import _get
    from rlxf.trainer.checkpoint import CheckpointDamaged

    actor = _Raiser.remote()
    for kind, cls in (("input", UserInputError), ("damaged", CheckpointDamaged)):
        with pytest.raises(cls) as caught:
            _get(actor.fail.remote(kind))
        assert type(caught.value) is cls and str(caught.value) == "what to do"
        assert isinstance(caught.value.__cause__, RayTaskError)   # the actor's traceback, for RLXF_DEBUG
        assert "_Raiser.fail" in str(caught.value.__cause__)
    with pytest.raises(RayTaskError):   # not rlxf's: Ray's error locates it
        _get(actor.fail.remote("other"))


@ray.remote(num_cpus=0)
class _LoadsWeights:
    def __init__(self, broken: bool = False):
        if broken:
            raise OSError("no such model")

    def update_weights(self, weights, version: int) -> int:
        return version


@ray.remote(num_cpus=0)
class _DiesLoadingWeights:
    def update_weights(self, weights, version: int) -> int:
        import os

        os._exit(1)


def _engines_from(*made) -> RayPlacement:
    """A RayPlacement holding only what replacing engine 0 needs; its new engines come from ``made``."""
    from types import SimpleNamespace

    placement = object.__new__(RayPlacement)
    placement.cfg = SimpleNamespace(ray=SimpleNamespace(max_restarts=5))
    placement.restarts, placement.restarts_by_role = 0, {"engine": 0, "reward": 0}
    placement._engines, placement._version, placement._weights_version = [None], 3, 3
    placement._weights_ref, placement._connected = ray.put({}), True
    handles = iter(made)
    placement._new_engine = lambda: next(handles)
    return placement


def test_a_replacement_engine_that_dies_loading_the_weights_is_replaced_in_turn(local_ray):
    """The new engine died in its update_weights: its ActorDiedError ended the run, uncounted."""
    healthy = _LoadsWeights.remote()
    placement = _engines_from(_DiesLoadingWeights.remote(), healthy)
    placement._replace_engine(0, RuntimeError("killed"))
    assert placement._engines == [healthy] and placement.stats()["ray/engine_restarts"] == 2.0
    assert ray.get(healthy.update_weights.remote({}, 4)) == 4


def test_an_engine_that_cannot_start_is_not_replaced_over_and_over(local_ray):
    """A constructor that raises fails every replacement alike: said at once, not after
    ray.max_restarts restarts as 'died N times'."""
    placement = _engines_from(_LoadsWeights.remote(broken=True), _LoadsWeights.remote())
    with pytest.raises(RuntimeError, match=r"(?s)engine actor could not start.*no such model"):
        placement._replace_engine(0, RuntimeError("killed"))
    assert placement.restarts == 1



def test_a_start_that_fails_leaves_no_actor_behind(tmp_path, nano_model_dir, monkeypatch):
    """A learner whose start failed (a bad model, a refused config) was left holding its CPUs in
    this process's Ray: the corrected run, in the same notebook, could not be placed. (No Ray
    starts here: the actor handles are stand-ins, and kills are recorded.)"""
    from types import SimpleNamespace

    from rlxf.errors import UserInputError

    learner, killed = SimpleNamespace(start=SimpleNamespace(remote=lambda *args: "a started ref")), []

    def start_fails(self, refs):
        raise UserInputError("model.path: no such model")

    monkeypatch.setattr(ray, "is_initialized", lambda: True)   # joins "a running Ray", so leaves it running
    monkeypatch.setattr(ray, "kill", killed.append)
    monkeypatch.setattr(RayPlacement, "_new_learner", lambda self, cls: learner)
    monkeypatch.setattr(RayPlacement, "_wait_placed", lambda self, role, handles: None)
    monkeypatch.setattr(RayPlacement, "_gather", start_fails)
    with pytest.raises(UserInputError, match="no such model"):
        RayPlacement(_cfg(tmp_path, nano_model_dir, "fails", "run.placement=ray"))
    assert killed == [learner]
