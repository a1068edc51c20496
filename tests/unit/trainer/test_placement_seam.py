"""The seam between the RL loop and the placement: the loop talks only to ``Placement``, the
trainer never imports a placement, and what an algorithm needs comes from the registry."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import rlxf
from rlxf.algorithms import Needs, register
from rlxf.config import ConfigError, load_config
from rlxf.placement.base import Placement
from rlxf.rollout import SamplingParams
from rlxf.run_dir import RunDir
from rlxf.trainer.loop import train
from rlxf.types import Prompt, Trajectory

PACKAGE = Path(rlxf.__file__).parent


def _config(tmp_path: Path, *overrides: str):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "run: {name: fake, output_dir: %s}\n"
        "model: {path: unused}\n"
        "data: {task: arithmetic, task_options: {max_digits: 2, ops: '+'}, train_size: 40, test_size: 4}\n"
        "rollout: {n: 2, max_new_tokens: 4}\n"
        "train: {steps: 4, prompts_per_step: 2, micro_batch_size: 4}\n"
        "eval: {every: 2, num_problems: 4}\n"
        "checkpoint: {every: 2}\n"
        "logging: {progress: false}\n" % (tmp_path / "runs"))
    return load_config(cfg, list(overrides))


class RecordingPlacement(Placement):
    """A placement with no models: it records what the loop asks and answers with data."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.calls: list[tuple] = []
        self.version = 0

    def generate(self, prompts: list[Prompt], seeds: list[int], sampling: SamplingParams, *,
                 first_group: int = 0) -> list[Trajectory]:
        self.calls.append(("generate", len(prompts), sampling.n, sampling.temperature))
        return [Trajectory(prompt=p, group=first_group + g, response_ids=[5, 6], response_text="1",
                           rollout_logprobs=[-0.5, -0.5], loss_mask=[1, 1], policy_versions=[self.version] * 2,
                           finish_reason="stop")
                for g, p in enumerate(prompts) for _ in range(sampling.n)]

    def score(self, trajs: list[Trajectory], max_new_tokens: int) -> dict[str, float]:
        self.calls.append(("score", len(trajs)))
        for i, t in enumerate(trajs):
            t.reward, t.correct = float(i % 2), bool(i % 2)
        return {}

    def make_experience(self, trajs):
        self.calls.append(("make_experience", len(trajs)))
        return ("an experience", len(trajs)), {"advantage/mean": 0.0}

    def update(self, exp, step: int) -> dict[str, float]:
        self.calls.append(("update", exp, step))
        return {"grad_norm": 1.0, "skipped": 0.0}

    def sync_weights(self, version: int) -> None:
        self.calls.append(("sync_weights", version))
        self.version = version

    def save(self, directory: Path) -> None:
        self.calls.append(("save", directory.parent.name))
        (directory / "weights.json").write_text(json.dumps({"version": self.version}))

    def load(self, directory: Path) -> None:
        self.calls.append(("load", directory.name))
        self.version = json.loads((directory / "weights.json").read_text())["version"]

    def close(self) -> None:
        self.calls.append(("close",))


def _phases(calls, names=("generate", "score", "make_experience", "update", "sync_weights", "save", "load")):
    return [c for c in calls if c[0] in names]


def test_the_loop_drives_a_placement_through_its_interface_only(tmp_path, tokenizer_for_tests):
    cfg = _config(tmp_path)
    fake = RecordingPlacement(tokenizer_for_tests)
    run = RunDir.open(cfg.run.output_dir, cfg.run.name)
    last = train(cfg, run, fake)

    train_calls = [c for c in fake.calls if not (c[0] == "generate" and c[3] == 0.0)]
    step1 = _phases(train_calls)[:5]
    assert step1 == [("generate", 2, 2, cfg.rollout.temperature), ("score", 4), ("make_experience", 4),
                     ("update", ("an experience", 4), 1), ("sync_weights", 1)]
    assert [c[2] for c in fake.calls if c[0] == "update"] == [1, 2, 3, 4]
    assert [c[1] for c in fake.calls if c[0] == "sync_weights"] == [1, 2, 3, 4]
    # evaluation goes through the same interface, greedily (temperature 0, one sample)
    evals = [c for c in fake.calls if c[0] == "generate" and c[3] == 0.0]
    assert evals and all(c[1:3] == (4, 1) for c in evals)
    assert (run.checkpoints / "step_4" / "weights.json").exists()
    assert last["grad_norm"] == 1.0 and "time/step" in last and "accuracy" in last
    assert ("close",) not in fake.calls  # train() borrows the placement; its owner closes it


def test_resume_loads_the_checkpoint_into_the_placement_and_syncs_it(tmp_path, tokenizer_for_tests):
    cfg = _config(tmp_path, "train.steps=2")
    train(cfg, RunDir.open(cfg.run.output_dir, cfg.run.name), RecordingPlacement(tokenizer_for_tests))
    cfg = _config(tmp_path, "train.steps=4")
    fake = RecordingPlacement(tokenizer_for_tests)
    train(cfg, RunDir.open(cfg.run.output_dir, cfg.run.name, resume=True), fake, resume=True)
    assert _phases(fake.calls)[:2] == [("load", "step_2"), ("sync_weights", 2)]
    assert [c[2] for c in fake.calls if c[0] == "update"] == [3, 4]
    assert fake.version == 4


def _runtime_imports(path: Path) -> list[str]:
    """Modules ``path`` imports outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text())
    type_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                 and "TYPE_CHECKING" in ast.unparse(node.test) for n in ast.walk(node)}
    out = []
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append(node.module)
    return out


def test_the_trainer_never_imports_a_placement():
    offenders = {str(p.relative_to(PACKAGE)): m for p in (PACKAGE / "trainer").rglob("*.py")
                 for m in _runtime_imports(p) if m.startswith("rlxf.placement")}
    assert not offenders, offenders


def test_the_local_placement_imports_no_ray():
    code = "import sys, rlxf.placement.local, rlxf.trainer.loop; print(any(m.split('.')[0] == 'ray' for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_plugin_estimator_that_needs_values_gets_a_critic(tmp_path, nano_model_dir):
    from rlxf.config.explain import ModelDims, memory_estimate
    from rlxf.models import load_from_config
    from rlxf.placement.local import build_learner

    @register("advantage", "critic_plugin_for_tests", needs=Needs(values=True))
    def with_values(rewards, mask, group_ids, values, params):
        return values, values

    cfg = _config(tmp_path, f"model.path={nano_model_dir}", "algorithm.advantage=critic_plugin_for_tests")
    model, tok = load_from_config(cfg.model)
    assert build_learner(cfg, model, tok).critic is not None
    plain = _config(tmp_path, f"model.path={nano_model_dir}", "algorithm.advantage=reinforce_pp")
    assert build_learner(plain, model, tok).critic is None
    dims = ModelDims(params=1000, layers=2, hidden=8, kv_dim=8, vocab=16, intermediate=16)
    assert "critic" in [r.role for r in memory_estimate(cfg, dims)]
    assert "critic" not in [r.role for r in memory_estimate(plain, dims)]


def test_a_plugin_estimator_that_compares_samples_needs_groups(tmp_path):
    @register("advantage", "group_plugin_for_tests", needs=Needs(groups=True))
    def grouped(rewards, mask, group_ids, values, params):
        return rewards, rewards

    _config(tmp_path, "algorithm.advantage=group_plugin_for_tests")  # n = 2: fine
    with pytest.raises(ConfigError, match=r"rollout.n >= 2"):
        _config(tmp_path, "algorithm.advantage=group_plugin_for_tests", "rollout.n=1", "train.micro_batch_size=2")
    _config(tmp_path, "algorithm.advantage=reinforce_pp", "rollout.n=1", "train.micro_batch_size=2")  # needs no groups


def test_explain_shows_which_roles_run_where(tmp_path):
    from rlxf.config.explain import RoleMemory, placement_table

    roles = [RoleMemory("actor", weights=100), RoleMemory("reference", weights=10), RoleMemory("engine", weights=7)]
    local = placement_table(_config(tmp_path), roles)
    assert local == [("this process", "actor, reference, engine, reward", "all of this machine's", 117)]
    split = placement_table(_config(tmp_path, "run.placement=ray", "ray.mode=disaggregated", "ray.engines=2",
                                    "ray.engine_gpus=1"), roles)
    assert [row[0] for row in split] == ["Ray actor: learner", "Ray actor: engine 0", "Ray actor: engine 1",
                                         "driver (rlxf train)"]
    assert split[0][1:] == ("actor, reference", "1 CPU", 110)
    assert split[1][2:] == ("1 CPU, 1 GPU", 7)
    scored = placement_table(_config(tmp_path, "run.placement=ray", "ray.mode=disaggregated", "ray.reward_actors=2",
                                     "ray.reward_cpus=2"), roles)
    assert [row[:3] for row in scored[2:]] == [("Ray actor: reward 0", "reward (the verifiers, own verifier pool)", "2 CPU"),
                                               ("Ray actor: reward 1", "reward (the verifiers, own verifier pool)", "2 CPU"),
                                               ("driver (rlxf train)", "data", "-")]
    with pytest.raises(ConfigError, match="ray.reward_actors"):
        _config(tmp_path, "run.placement=ray", "ray.reward_actors=1")   # colocated: scored in the one actor


def test_explain_shows_learner_ranks_their_share_and_the_weight_path(tmp_path):
    from rlxf.config.explain import RoleMemory, placement_notes, placement_table

    roles = [RoleMemory("actor", weights=40, grads=40, optimizer=80, activations=5),
             RoleMemory("reference", weights=40), RoleMemory("engine", weights=7)]
    ray = ("run.placement=ray", "ray.learners=4", "ray.learner_gpus=1")
    fsdp = _config(tmp_path, *ray, "ray.mode=disaggregated", "ray.learner_strategy=fsdp", "ray.engine_gpus=1",
                   "ray.weight_sync=collective")
    rows = placement_table(fsdp, roles)
    assert [r[0] for r in rows[:4]] == [f"Ray actor: learner rank {i}" for i in range(4)]
    assert rows[0][3] == 160 // 4 + 5 + 40  # a quarter of weights, grads and moments; own activations; reference
    notes = "\n".join(placement_notes(fsdp))
    assert "4 ranks over NCCL; FSDP2" in notes and "broadcasts to the 1 engine(s) (NCCL, GPU to GPU)" in notes

    ddp = placement_table(_config(tmp_path, *ray), roles)  # colocated: rank 0 also holds engine and reward
    assert [r[0] for r in ddp] == ["Ray actor: colocated rank 0"] + [f"Ray actor: learner rank {i}" for i in (1, 2, 3)]
    assert ddp[0][3] == 205 + 7 and ddp[1][3] == 205
    assert "DDP" in "\n".join(placement_notes(_config(tmp_path, *ray)))
    assert "object store" in "\n".join(placement_notes(_config(tmp_path, "run.placement=ray", "ray.mode=disaggregated")))


def test_a_lost_learner_ends_the_run_naming_the_last_checkpoint(tmp_path, tokenizer_for_tests, monkeypatch):
    import rlxf.placement
    from rlxf.placement import LearnerLost, run_training

    class DiesAtStep3(RecordingPlacement):
        def update(self, exp, step):
            if step == 3:
                raise LearnerLost("the learner actor died.")
            return super().update(exp, step)

    monkeypatch.setattr(rlxf.placement, "build", lambda cfg: DiesAtStep3(tokenizer_for_tests))
    cfg = _config(tmp_path)
    run = RunDir.open(cfg.run.output_dir, cfg.run.name)
    with pytest.raises(LearnerLost, match=r"last checkpoint is .*step_2"):
        run_training(cfg, run)


def test_the_loop_warns_when_no_group_carries_signal(tmp_path, tokenizer_for_tests, caplog):
    class NoSignal(RecordingPlacement):
        def update(self, exp, step):
            return {**super().update(exp, step), "groups/zero_variance_frac": 1.0}

    cfg = _config(tmp_path, "train.steps=12", "eval.every=0")
    with caplog.at_level("WARNING", logger="rlxf"):
        train(cfg, RunDir.open(cfg.run.output_dir, cfg.run.name), NoSignal(tokenizer_for_tests))
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert sum("no signal" in w or "equal rewards" in w for w in warnings) == 1, warnings


def test_fsdp_learners_refuse_what_they_do_not_shard(tmp_path):
    fsdp = ("run.placement=ray", "ray.learners=2", "ray.learner_strategy=fsdp")
    _config(tmp_path, *fsdp)
    with pytest.raises(ConfigError, match="does not shard a critic"):
        _config(tmp_path, *fsdp, "algorithm.name=ppo")
    with pytest.raises(ConfigError, match="does not shard LoRA"):
        _config(tmp_path, *fsdp, "model.lora.r=8")
    _config(tmp_path, "run.placement=ray", "ray.learners=2", "algorithm.name=ppo", "model.lora.r=8")  # ddp: both
