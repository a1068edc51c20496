"""The optimizer and its learning-rate schedule: hand-derived multipliers, and the fused AdamW
matching torch's reference loop."""

from __future__ import annotations

import math

import pytest
import torch

from rlxf.config.train import OptimConfig
from rlxf.trainer.optim import build_optimizer, lr_lambda


@pytest.mark.parametrize(("step", "expected"), [(0, 0.25), (1, 0.5), (3, 1.0), (4, 1.0), (99, 1.0)])
def test_warmup_is_linear_then_constant(step, expected):
    assert lr_lambda(step, warmup=4, total=100, schedule="constant", min_ratio=0.0) == pytest.approx(expected)


@pytest.mark.parametrize(("step", "expected"), [
    (2, 1.0),                                     # the first step after warmup: cos(0)
    (7, 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 5 / 10))),   # half way: 0.55
    (12, 0.1),                                    # the end: min_ratio
    (50, 0.1),                                    # past the end it stays there
])
def test_cosine_decays_from_one_to_min_ratio_after_warmup(step, expected):
    assert lr_lambda(step, warmup=2, total=12, schedule="cosine", min_ratio=0.1) == pytest.approx(expected)


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 3))


def test_cpu_adamw_is_fused_and_steps_like_the_reference_loop():
    cfg = OptimConfig(lr=1e-2, weight_decay=0.1, warmup_steps=2)
    fast, ref = _model(0), _model(0)
    opt, sched = build_optimizer(fast.parameters(), cfg, total_steps=10)
    assert opt.defaults["fused"] is True
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1, foreach=False)
    ref_sched = torch.optim.lr_scheduler.LambdaLR(ref_opt, lambda s: (s + 1) / 2 if s < 2 else 1.0)
    x = torch.randn(8, 6, generator=torch.Generator().manual_seed(1))
    for _ in range(4):
        for model, o, s in ((fast, opt, sched), (ref, ref_opt, ref_sched)):
            model(x).square().sum().backward()
            o.step()
            s.step()
            o.zero_grad()
    for a, b in zip(fast.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
    assert sched.get_last_lr() == ref_sched.get_last_lr() == [1e-2]


def test_frozen_parameters_are_left_out():
    model = _model(0)
    model[0].weight.requires_grad_(False)
    opt, _ = build_optimizer(model.parameters(), OptimConfig(), total_steps=1)
    assert sum(len(g["params"]) for g in opt.param_groups) == 3
    assert all(p is not model[0].weight for g in opt.param_groups for p in g["params"])


def test_auto_lr_is_calibrated_at_7b_and_scales_with_width_times_depth():
    from types import SimpleNamespace

    from rlxf.trainer.optim import auto_lr, resolve_lr

    assert auto_lr(3584, 28) == pytest.approx(0.1 / 100352)          # Qwen2.5-7B: 9.96e-7
    assert auto_lr(256, 4) == pytest.approx(0.1 / 1024)               # the tiny preset: 9.77e-5
    assert auto_lr(896, 24) / auto_lr(3584, 28) == pytest.approx(3584 * 28 / (896 * 24))
    assert resolve_lr("auto", SimpleNamespace(hidden_size=256, num_hidden_layers=4)) == auto_lr(256, 4)
    assert resolve_lr(3e-4, None) == 3e-4                             # a number is used as it is
    with pytest.raises(ValueError, match="hidden_size and num_hidden_layers.*Set train.optim.lr"):
        resolve_lr("auto", SimpleNamespace(d_model=256))


def test_auto_lr_reaches_the_optimizer_from_the_models_config():
    from types import SimpleNamespace

    from rlxf.config.train import PolicyOptimConfig

    model = _model(0)
    opt, _ = build_optimizer(model.parameters(), PolicyOptimConfig(), total_steps=10,
                             model_config=SimpleNamespace(hidden_size=64, num_hidden_layers=2))
    assert opt.param_groups[0]["lr"] == pytest.approx(0.1 / 128)
    with pytest.raises(ValueError, match="must be > 0 or `auto`"):
        PolicyOptimConfig(lr=0.0)
