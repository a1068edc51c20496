"""A data mixture trains end to end: per-source eval, curriculum skipping, PPO-ptx, and a
resume mid-mixture that repeats the uninterrupted run bit for bit."""

from __future__ import annotations

from functools import partial

import torch
from rl_helpers import metrics, write_config
from safetensors.torch import load_file

from rlxf.cli.main import main

ARITH = {"task": "arithmetic", "train_size": 4, "test_size": 6}
MIXTURE = {
    "task": None, "train_size": 500, "test_size": 16,   # the helper's single source, unset
    "sources": [{**ARITH, "name": "add", "task_options": {"max_digits": 2, "ops": "+"}, "weight": 1},
                {**ARITH, "name": "sub", "task_options": {"max_digits": 2, "ops": "-"}, "weight": 1}],
    "curriculum": {"skip_unsolved": True, "skip_solved": True, "window": 1},
    "ptx": {"task": "arithmetic", "task_options": {"max_digits": 1, "ops": "+"}, "train_size": 50, "batch_size": 4},
}


def test_mixture_with_curriculum_and_ptx_resumes_bit_exactly(tmp_path, nano_model_dir):
    """4 steps straight == 2 steps, then --resume for 2 more: the mixture's position, the
    curriculum's records and the demonstrations' position all come back from the checkpoint."""
    runs = str(tmp_path / "runs")
    # the exact-answer reward: the nano model's groups are all wrong with equal rewards, so the
    # curriculum flags them (a dense reward that differs within a group has signal, and does not)
    # (a constant lr: the split run is 2 steps long first, and a cosine schedule is laid over the length)
    common = {"data": MIXTURE, "algorithm": {"ptx_coef": 0.5}, "eval": {"every": 2, "num_problems": 3},
              "reward": {"verifiers": [{"type": "numeric"}]},
              "train": {"steps": 4, "prompts_per_step": 4, "micro_batch_size": 8,
                        "optim": {"lr": 3e-3, "schedule": "constant"}}}
    straight = write_config(tmp_path / "a", nano_model_dir, run={"name": "straight", "output_dir": runs}, **common)
    split = write_config(tmp_path / "b", nano_model_dir, run={"name": "split", "output_dir": runs}, **common)
    assert main(["train", str(straight)]) == 0
    assert main(["train", str(split), "train.steps=2"]) == 0
    assert main(["train", str(split), "--resume"]) == 0
    a = load_file(tmp_path / "runs/straight/checkpoints/step_4/model/model.safetensors")
    b = load_file(tmp_path / "runs/split/checkpoints/step_4/model/model.safetensors")
    assert all(torch.equal(a[k], b[k]) for k in a)
    base = load_file(nano_model_dir / "model.safetensors")
    assert any(not torch.equal(a[k], base[k]) for k in a)  # it trained: the equality is not vacuous
    ma, mb = metrics(tmp_path / "runs/straight"), metrics(tmp_path / "runs/split")
    drop = ("time/", "throughput/")
    assert [m["step"] for m in mb] == [1, 2, 3, 4]
    for x, y in zip(ma, mb):
        assert {k: v for k, v in x.items() if not k.startswith(drop)} == {k: v for k, v in y.items() if not k.startswith(drop)}
    last = ma[-1]
    # per-source held-out accuracy and its mean; the supervised term; the curriculum's counts
    assert {"eval/add/accuracy", "eval/sub/accuracy", "eval/source_mean_accuracy", "loss/ptx"} <= set(last)
    assert last["eval/source_mean_accuracy"] == (last["eval/add/accuracy"] + last["eval/sub/accuracy"]) / 2
    # 8 training prompts, 4 per step: every prompt was seen once by step 2, so steps 3-4 skip
    assert sum(m["curriculum/skipped_unsolved"] + m["curriculum/skipped_solved"] for m in ma[2:]) > 0
    assert all(m["curriculum/skipped_unsolved"] == m["curriculum/skipped_solved"] == 0 for m in ma[:2])


def test_ptx_coefficient_zero_is_the_plain_update_bit_for_bit(tmp_path, nano_model_dir):
    from rlxf.config import load_config
    from rlxf.data import build_prompt_data
    from rlxf.data.demos import build_demonstrations
    from rlxf.models import sequence_logprobs
    from rlxf.placement.local import LocalPlacement
    from rlxf.rollout import SamplingParams
    from rlxf.trainer.roles import nll_shares

    ptx = {"task": "arithmetic", "task_options": {"max_digits": 1, "ops": "+"}, "train_size": 50, "batch_size": 4}
    path = write_config(tmp_path, nano_model_dir, data={"ptx": ptx})

    def placement(coef: float) -> LocalPlacement:
        return LocalPlacement.from_config(load_config(path, [f"algorithm.ptx_coef={coef}"]))

    plain, zero, mixed = placement(0.0), placement(0.0), placement(0.5)
    cfg = load_config(path, ["algorithm.ptx_coef=0.5"])
    data = build_prompt_data(cfg.data, plain.tokenizer, seed=0)
    demos = build_demonstrations(cfg, plain.tokenizer, data.held_out)
    assert demos is not None
    batches = demos.next_batches(cfg.derived.optimizer_steps_per_step)
    trajs = plain.generate(data.train[:4], [1, 2, 3, 4], SamplingParams.from_config(cfg.rollout))
    plain.score(trajs, cfg.rollout.max_new_tokens)
    exp, _ = plain.make_experience(trajs)
    nll: list[float] = []
    tokens = sum(len(e.response_ids) for e in batches[0])
    with torch.no_grad():
        forward = partial(mixed.learner.actor.run, sequence_logprobs)
        before = [float(x) for x in nll_shares(forward, batches[0], 8, tokens, nll)]

    m_plain = plain.update(exp, 1)
    m_zero = zero.update(exp, 1, demos=batches)
    m_mixed = mixed.update(exp, 1, demos=batches)
    weights = [dict(p.learner.actor.model.named_parameters()) for p in (plain, zero, mixed)]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert "loss/ptx" not in m_zero and m_plain == m_zero
    assert any(not torch.equal(weights[0][k], weights[2][k]) for k in weights[0])
    # one optimizer step: the logged ptx loss is the demonstrations' mean NLL before it
    assert m_mixed["loss/ptx"] == sum(before)
