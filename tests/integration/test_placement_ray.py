"""`run.placement: ray` on a local Ray instance (2 CPUs): the same weights as `local`, resume
across placements, and actors killed for real."""

from __future__ import annotations

import pytest
import torch
from rl_helpers import write_config
from safetensors.torch import load_file

ray = pytest.importorskip("ray")

from rlxf.config import load_config  # noqa: E402
from rlxf.placement import build, run_training  # noqa: E402
from rlxf.placement.ray import LearnerLost, RayPlacement  # noqa: E402
from rlxf.rollout import SamplingParams  # noqa: E402
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


def _cfg(tmp_path, model_dir, name, *overrides):
    path = write_config(tmp_path / name, model_dir, train={"steps": 3, "prompts_per_step": 4, "micro_batch_size": 8,
                                                           "optim": {"lr": 3e-3}},
                        checkpoint={"every": 1, "keep_last": 3}, run={"name": name, "output_dir": str(tmp_path / "runs")})
    return load_config(path, list(overrides))


def _weights(tmp_path, name, step=3):
    return load_file(tmp_path / "runs" / name / "checkpoints" / f"step_{step}" / "model" / "model.safetensors")


def _train(cfg, resume=False):
    return run_training(cfg, RunDir.open(cfg.run.output_dir, cfg.run.name, resume=resume), resume=resume)


def test_ray_placements_learn_what_local_learns_and_resume_across_placements(
        tmp_path, nano_model_dir, local_ray, one_thread):
    _train(_cfg(tmp_path, nano_model_dir, "local"))
    _train(_cfg(tmp_path, nano_model_dir, "colocated", "run.placement=ray"))
    _train(_cfg(tmp_path, nano_model_dir, "split", "run.placement=ray", "ray.mode=disaggregated",
                "train.steps=2"))
    _train(_cfg(tmp_path, nano_model_dir, "split"), resume=True)  # ray -> local
    _train(_cfg(tmp_path, nano_model_dir, "back", "train.steps=2"))
    _train(_cfg(tmp_path, nano_model_dir, "back", "run.placement=ray", "ray.mode=disaggregated"), resume=True)

    local = _weights(tmp_path, "local")
    base = load_file(nano_model_dir / "model.safetensors")
    assert any(not torch.equal(local[k], base[k]) for k in local)  # it trained: the equalities are not vacuous
    for name in ("colocated", "split", "back"):
        other = _weights(tmp_path, name)
        assert local.keys() == other.keys()
        diff = max(float((local[k] - other[k]).abs().max()) for k in local)
        assert diff <= 1e-6, (name, diff)  # bit-identical on one CPU; a tolerance for other BLAS builds


def test_a_killed_engine_is_replaced_and_its_requests_retried(tmp_path, nano_model_dir, local_ray, one_thread):
    cfg = _cfg(tmp_path, nano_model_dir, "kill", "run.placement=ray", "ray.mode=disaggregated", "ray.engines=2",
               "ray.engine_cpus=0.5", "ray.learner_cpus=0.5")
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

        ray.kill(placement._learner)
        with pytest.raises(LearnerLost, match="--resume"):
            placement.save(tmp_path / "nowhere")
    finally:
        placement.close()
    assert ray.is_initialized()  # it joined the module's Ray instance, so it leaves it running


def test_env_episodes_on_disaggregated_engines_train_as_local(tmp_path, nano_model_dir, local_ray, one_thread):
    """Multi-turn episodes run inside the engine actor (agent loop next to its engine), scored on the
    driver: the same trajectories, so the same weights, as the local placement."""
    env = ["env={name: 'agentic_plugins:DigitsEnv', max_turns: 2, max_total_tokens: 96}", "rollout.max_new_tokens=4",
           "train.steps=2", "train.prompts_per_step=2", "logging.samples_fraction=1.0"]
    _train(_cfg(tmp_path, nano_model_dir, "env-local", *env))
    _train(_cfg(tmp_path, nano_model_dir, "env-split", *env, "run.placement=ray", "ray.mode=disaggregated"))
    local, split = _weights(tmp_path, "env-local", 2), _weights(tmp_path, "env-split", 2)
    base = load_file(nano_model_dir / "model.safetensors")
    assert any(not torch.equal(local[k], base[k]) for k in local)
    assert max(float((local[k] - split[k]).abs().max()) for k in local) <= 1e-6
    runs = tmp_path / "runs"
    samples = [(runs / name / "samples.jsonl").read_text() for name in ("env-local", "env-split")]
    assert samples[0] == samples[1] and '"turns": 2' in samples[0]     # the episodes themselves, step by step
