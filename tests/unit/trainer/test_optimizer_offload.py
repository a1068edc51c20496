"""train.offload_optimizer: AdamW's moments wait in host memory between updates, and training is
unchanged by it (bit for bit). The move itself needs a GPU; on CPU nothing moves."""

from __future__ import annotations

import copy

import pytest
import torch

from rlxf.config import Config
from rlxf.config.explain import offload_note
from rlxf.config.train import OptimConfig
from rlxf.models import load_model
from rlxf.trainer.trainable import TrainableModel


def _steps(core: TrainableModel, offload: bool, steps: int = 3) -> list[int]:
    """A few optimizer steps on a fixed batch, offloading after each (restoring before the next)."""
    ids = torch.arange(1, 17, device=core.device).reshape(2, 8)
    moved = []
    for _ in range(steps):
        if offload:
            core.restore_optimizer_state()
        core.train_step([core.model(input_ids=ids, labels=ids).loss])
        if offload:
            moved.append(core.offload_optimizer_state())
    return moved


def test_on_cpu_nothing_moves_and_training_is_unchanged(nano_model_dir):
    model = load_model(nano_model_dir, device="cpu")
    plain, offloaded = (TrainableModel(copy.deepcopy(model), OptimConfig(lr=1e-2), 10) for _ in range(2))
    _steps(plain, offload=False)
    assert _steps(offloaded, offload=True) == [0, 0, 0]
    for (name, a), (_, b) in zip(plain.model.named_parameters(), offloaded.model.named_parameters(), strict=True):
        assert torch.equal(a, b), name


def test_explain_says_where_the_optimizer_state_waits():
    base = {"model": {"path": "m"}, "data": {"task": "arithmetic"}}
    assert offload_note(Config.model_validate(base)) == []                      # auto on CPU: nothing moves
    gpu = Config.model_validate({**base, "model": {"path": "m", "device": "cuda"}})
    assert "pinned host memory" in offload_note(gpu)[0] and "a GPU" in offload_note(gpu)[0]
    assert offload_note(gpu.model_copy(update={"train": gpu.train.model_copy(update={"offload_optimizer": "off"})})) == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_moments_leave_the_device_and_come_back_bit_exact(nano_model_dir):
    model = load_model(nano_model_dir, device="cuda", dtype=torch.float32)
    plain, offloaded = (TrainableModel(copy.deepcopy(model), OptimConfig(lr=1e-2), 10) for _ in range(2))
    _steps(plain, offload=False)
    before = torch.cuda.memory_allocated()
    moved = _steps(offloaded, offload=True)
    moments = 2 * sum(p.numel() * 4 for p in model.parameters())
    assert all(m >= moments for m in moved)
    state = [v for s in offloaded.optimizer.state.values() for v in s.values() if torch.is_tensor(v) and v.numel() > 1]
    assert state and all(v.device.type == "cpu" and v.is_pinned() for v in state)
    assert torch.cuda.memory_allocated() < before + moments // 2   # kept on the device, they would add `moments`
    for (name, a), (_, b) in zip(plain.model.named_parameters(), offloaded.model.named_parameters(), strict=True):
        assert torch.equal(a, b), name
