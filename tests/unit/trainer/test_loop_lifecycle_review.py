"""The RL loop's lifecycle across a resume: checkpoints kept, the lr schedule, the lr logged,
and the diagnostics, each as an uninterrupted run would have them."""

from __future__ import annotations

import json
import logging
import signal
import threading
from pathlib import Path

import pytest
import torch

from rlxf.config import load_config
from rlxf.config.algorithm import AlgorithmConfig
from rlxf.config.train import OptimConfig
from rlxf.errors import UserInputError
from rlxf.models import load_model
from rlxf.placement.base import Placement
from rlxf.rollout import SamplingParams
from rlxf.run_dir import RunDir
from rlxf.trainer.checkpoint import intact_checkpoint, list_checkpoints, save_checkpoint
from rlxf.trainer.interrupt import TrainingInterrupted
from rlxf.trainer.loop import train
from rlxf.trainer.objective import PolicyObjective
from rlxf.trainer.roles import Actor, ForwardSpec
from rlxf.trainer.trainable import TrainableModel
from rlxf.types import Experience, Prompt, Trajectory


def _write(directory: Path) -> None:
    torch.save({"w": torch.ones(2)}, directory / "learner_state.pt")


def test_a_save_after_resuming_past_a_damaged_checkpoint_keeps_itself(tmp_path):
    """step_6 was damaged, so the run resumed from step_4; its next save (step_5, keep_last=1)
    deleted itself and step_4 and kept the damaged step_6: nothing left to resume from."""
    for step in (4, 6):
        save_checkpoint(tmp_path, step, write=_write, state={}, keep_last=2)
    (tmp_path / "step_6" / "learner_state.pt").write_bytes(b"not a torch archive")
    assert intact_checkpoint(tmp_path) == tmp_path / "step_4"
    save_checkpoint(tmp_path, 5, write=_write, state={}, keep_last=1)
    assert [n for n, _ in list_checkpoints(tmp_path)] == [5]
    assert intact_checkpoint(tmp_path) == tmp_path / "step_5"


def test_keep_last_counts_the_checkpoint_just_written(tmp_path):
    for step in (1, 2, 3, 4):
        save_checkpoint(tmp_path, step, write=_write, state={}, keep_last=3)
    assert [n for n, _ in list_checkpoints(tmp_path)] == [2, 3, 4]
    save_checkpoint(tmp_path, 5, write=_write, state={}, keep_last=9)
    assert [n for n, _ in list_checkpoints(tmp_path)] == [2, 3, 4, 5]


def _linear() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(2, 1)


def test_a_cosine_schedule_refuses_a_resume_that_changes_the_runs_length():
    """The lambda is rebuilt from the new total: a 2-step cosine run that decayed to lr 0,
    resumed to 4 steps, climbed back to lr x 0.146 at step 3 (what a 4-step run has at step 4)."""
    saved = TrainableModel(_linear(), OptimConfig(lr=1.0, schedule="cosine"), total_steps=2).state_dict()
    with pytest.raises(UserInputError, match=r"cosine schedule .* 2 in the checkpoint and 4 with this config"):
        TrainableModel(_linear(), OptimConfig(lr=1.0, schedule="cosine"), total_steps=4).load_state_dict(saved)
    TrainableModel(_linear(), OptimConfig(lr=1.0, schedule="cosine"), total_steps=2).load_state_dict(saved)
    # a constant schedule does not depend on the length: a longer run resumes
    constant = TrainableModel(_linear(), OptimConfig(lr=1.0, warmup_steps=3), total_steps=2).state_dict()
    TrainableModel(_linear(), OptimConfig(lr=1.0, warmup_steps=3), total_steps=4).load_state_dict(constant)


def test_the_lr_logged_is_the_one_the_step_used():
    """Warm-up over 4 steps: step k takes lr x k/4 (k = 1..4); the step logged the next one's."""
    core = TrainableModel(_linear(), OptimConfig(lr=1.0, warmup_steps=4), total_steps=8)
    x = torch.ones(3, 2)
    lrs = [core.train_step([core.model(x).pow(2).mean()])["lr"] for _ in range(5)]
    assert lrs == [0.25, 0.5, 0.75, 1.0, 1.0]


def test_the_actor_logs_the_lr_its_step_used(nano_model_dir):
    objective = PolicyObjective.from_config(AlgorithmConfig(), max_new_tokens=8)
    actor = Actor(load_model(nano_model_dir), objective, OptimConfig(lr=1e-2, warmup_steps=2), total_steps=4,
                  spec=ForwardSpec(micro_batch_size=2))
    prompts, responses = [[11, 12, 13], [14, 15]], [[21, 22], [23]]
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    exp = Experience(prompt_ids=prompts, response_ids=responses, mask=mask, rollout_logprobs=torch.zeros(2, 2),
                     old_logprobs=None, advantages=torch.tensor([[1.0, 1.0], [-1.0, 0.0]]),
                     group_ids=torch.tensor([0, 0]), rewards=torch.tensor([1.0, -1.0]))
    metrics, _, _ = actor.update(exp, [[0, 1]], kl_coef=0.0)
    assert metrics["lr"] == pytest.approx(0.5e-2) and metrics["skipped"] == 0.0


# The loop on a placement without models: held-out accuracy 1 before training, 0 after.

class FallingAccuracy(Placement):
    """Every held-out answer right before the first update, wrong after it."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.version = 0

    def generate(self, prompts: list[Prompt], seeds: list[int], sampling: SamplingParams, *,
                 first_group: int = 0) -> list[Trajectory]:
        return [Trajectory(prompt=p, group=first_group + g, response_ids=[5, 6], response_text="1",
                           rollout_logprobs=[-0.5, -0.5], loss_mask=[1, 1], policy_versions=[self.version] * 2,
                           finish_reason="stop")
                for g, p in enumerate(prompts) for _ in range(sampling.n)]

    def score(self, trajs: list[Trajectory], max_new_tokens: int) -> dict[str, float]:
        for i, t in enumerate(trajs):
            t.reward, t.correct = float(i % 2), bool(i % 2) or self.version == 0
        return {}

    def make_experience(self, trajs):
        return len(trajs), {}

    def update(self, exp, step: int) -> dict[str, float]:
        return {"skipped": 0.0}

    def sync_weights(self, version: int) -> None:
        self.version = version

    def save(self, directory: Path) -> None:
        (directory / "weights.json").write_text(json.dumps({"version": self.version}))

    def load(self, directory: Path) -> None:
        self.version = json.loads((directory / "weights.json").read_text())["version"]

    def close(self) -> None:
        pass


def _config(tmp_path: Path, steps: int):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"run: {{name: fake, output_dir: {tmp_path / 'runs'}}}\n"
        "model: {path: unused}\n"
        "data: {task: arithmetic, task_options: {max_digits: 2, ops: '+'}, train_size: 40, test_size: 4}\n"
        "rollout: {n: 2, max_new_tokens: 4}\n"
        f"train: {{steps: {steps}, prompts_per_step: 2, micro_batch_size: 4}}\n"
        "eval: {every: 1, at_start: true, num_problems: 4}\n"
        "checkpoint: {every: 2}\n"
        "logging: {progress: false}\n")
    return load_config(cfg)


class Warnings(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def warnings():
    handler, log = Warnings(), logging.getLogger("rlxf")
    log.addHandler(handler)
    yield handler.messages
    log.removeHandler(handler)


def _falling(messages: list[str]) -> list[str]:
    return [m for m in messages if "below its first value" in m]


def test_held_out_accuracy_below_the_start_is_told(tmp_path, tokenizer_for_tests, warnings):
    """Accuracy 1 at the start's evaluation, 0 at steps 1, 2, 3: three evaluations below the
    first one (eval_patience 3). The start's evaluation was not read, so the first value was
    step 1's 0, and the warning never came."""
    cfg = _config(tmp_path, 4)
    train(cfg, RunDir.open(cfg.run.output_dir, cfg.run.name), FallingAccuracy(tokenizer_for_tests))
    falling = _falling(warnings)
    assert len(falling) == 1 and falling[0].startswith("step 3:") and "(100.0%)" in falling[0]


def test_a_resumed_run_warns_as_the_uninterrupted_one(tmp_path, tokenizer_for_tests, warnings):
    """Stopped after step 2 and resumed: the steps done are read back from metrics.jsonl, so the
    warning comes at step 3 (the first value is the start's), and once."""
    cfg = _config(tmp_path, 2)
    train(cfg, RunDir.open(cfg.run.output_dir, cfg.run.name), FallingAccuracy(tokenizer_for_tests))
    assert not _falling(warnings)
    cfg = _config(tmp_path, 6)
    train(cfg, RunDir.open(cfg.run.output_dir, cfg.run.name, resume=True), FallingAccuracy(tokenizer_for_tests),
          resume=True)
    falling = _falling(warnings)
    assert len(falling) == 1 and falling[0].startswith("step 3:") and "(100.0%)" in falling[0]


class SignalledAt(FallingAccuracy):
    """SIGTERM to this (the main) thread while step ``at`` trains."""

    def __init__(self, tokenizer, at: int):
        super().__init__(tokenizer)
        self.at = at

    def update(self, exp, step: int) -> dict[str, float]:
        if step == self.at:
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
        return super().update(exp, step)


def test_a_signal_in_the_last_step_ends_the_run_as_finished(tmp_path, tokenizer_for_tests):
    """The run's work is done and saved: it ends as a finished run (the CLI writes the report and
    exits 0), not with "stopped by SIGTERM ... continue with --resume" and exit 143. A signal in
    an earlier step still stops the run there."""
    cfg = _config(tmp_path, 3)
    run = RunDir.open(cfg.run.output_dir, cfg.run.name)
    with pytest.raises(TrainingInterrupted, match="after step 1"):
        train(cfg, run, SignalledAt(tokenizer_for_tests, at=1))
    assert [n for n, _ in list_checkpoints(run.checkpoints)] == [1]
    last = train(cfg, run, SignalledAt(tokenizer_for_tests, at=3), resume=True)
    assert last and [n for n, _ in list_checkpoints(run.checkpoints)] == [2, 3]


def test_resuming_a_finished_run_says_there_is_nothing_to_train(tmp_path, tokenizer_for_tests, warnings):
    cfg = _config(tmp_path, 2)
    done = train(cfg, RunDir.open(cfg.run.output_dir, cfg.run.name), FallingAccuracy(tokenizer_for_tests))
    cfg = _config(tmp_path, 1)
    again = train(cfg, RunDir.open(cfg.run.output_dir, cfg.run.name, resume=True), FallingAccuracy(tokenizer_for_tests),
                  resume=True)
    assert again == done != {}   # its last record, as the run returned it
    assert any("has done 2 steps and train.steps is 1: nothing to train" in m for m in warnings)


class FailingUpdate(FallingAccuracy):
    def update(self, exp, step: int) -> dict[str, float]:
        raise ValueError("the step's own error")


def test_a_failing_close_of_the_outputs_does_not_hide_the_steps_error(tmp_path, tokenizer_for_tests, monkeypatch):
    from rlxf.trainer.state import RunState

    def broken_close(self):
        raise OSError("disk gone while closing")

    monkeypatch.setattr(RunState, "close", broken_close)
    cfg = _config(tmp_path, 2)
    with pytest.raises(ValueError, match="the step's own error") as caught:
        train(cfg, RunDir.open(cfg.run.output_dir, cfg.run.name), FailingUpdate(tokenizer_for_tests))
    assert any("disk gone while closing" in note for note in caught.value.__notes__)


def test_a_setting_the_run_never_reads_is_warned_at_its_start(tmp_path, tokenizer_for_tests, warnings):
    """`rlxf explain` listed such settings; a run (CLI or rlxf.train) said nothing."""
    cfg = _config(tmp_path, 1)
    cfg = cfg.model_copy(update={"algorithm": cfg.algorithm.model_copy(update={"kl_estimator": "k1"})})
    train(cfg, RunDir.open(cfg.run.output_dir, cfg.run.name), FallingAccuracy(tokenizer_for_tests))
    assert any("kl_estimator" in m and "does nothing" in m for m in warnings)
