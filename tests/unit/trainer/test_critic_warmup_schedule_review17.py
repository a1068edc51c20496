"""The actor's lr schedule under critic.warmup_steps: it spans the steps the actor takes."""

from __future__ import annotations

import pytest

from rlxf.config import load_config
from rlxf.models import load_model
from rlxf.placement.local import build_learner


def test_a_cosine_schedule_ends_where_it_should_after_the_critics_warm_up(tmp_path, nano_model_dir,
                                                                           tokenizer_for_tests):
    """4 steps, the first 2 the critic's alone: the actor takes 2 optimizer steps. Its cosine ran
    over 4, so it ended at lr x 0.854 (1 + cos(pi / 4)) / 2 instead of going down to lr x 0.5
    on its last step (and the critic's, over its 4 steps, to 0.146)."""
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(
        f"model: {{path: {nano_model_dir}}}\n"
        "data: {task: arithmetic}\n"
        "algorithm: {name: ppo}\n"
        "critic: {warmup_steps: 2, optim: {schedule: cosine}}\n"
        "rollout: {n: 2, max_new_tokens: 4}\n"
        "train: {steps: 4, prompts_per_step: 2, micro_batch_size: 4, optim: {lr: 1.0e-3, schedule: cosine, min_lr_ratio: 0.0}}\n")
    cfg = load_config(cfg_file)
    learner = build_learner(cfg, load_model(nano_model_dir), tokenizer_for_tests)
    assert learner.actor.total_steps == 2 and learner.critic.total_steps == 4
    lrs = []
    for _ in range(2):  # the actor's two steps: the schedule's multipliers 1 and (1 + cos(pi / 2)) / 2
        lrs.append(learner.actor.scheduler.get_last_lr()[0])
        learner.actor.optimizer.step()
        learner.actor.scheduler.step()
    assert lrs == pytest.approx([1.0e-3, 0.5e-3])
