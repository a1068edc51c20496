"""TrainClock: the training time a time budget counts, carried across --resume."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

from rlxf.trainer.state import TrainClock


def test_the_clock_counts_on_from_the_checkpoints_time(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    saved = TrainClock()
    now[0] = 130.0
    assert not saved.out_of(40.0)          # 30 s of 40
    now[0] = 135.0
    state = saved.state_dict()
    assert state == {"seconds": 35.0, "checked": 30.0, "budget": None}
    now[0] = 500.0                          # the process died; a new one resumes much later
    clock = TrainClock.restored({"clock": state}, Path("step_3"))
    clock.start()
    assert not clock.spent(40.0)            # the checkpointed step had 10 s to go: train on
    now[0] = 504.0
    assert clock.seconds() == 39.0 and not clock.out_of(40.0)
    now[0] = 505.0
    assert clock.out_of(40.0)               # 35 + 5: the budget ends here, not 40 s after the resume
    assert not clock.out_of(None)


def test_a_run_that_ended_by_its_budget_has_nothing_left_unless_it_is_raised():
    clock = TrainClock.restored({"clock": {"seconds": 41.0, "checked": 40.5}}, Path("step_9"))
    assert clock.spent(40.0) and not clock.spent(60.0) and not clock.spent(None)
    assert clock.before == 41.0


def test_a_checkpoint_keeps_the_time_its_own_write_took(monkeypatch, tmp_path):
    """The clock saved with a checkpoint is read after the models are written: a resumed run's
    budget counts the write (it was read before, so every checkpoint's write was time for free)."""
    import torch

    from rlxf.trainer.checkpoint import STATE_FILE
    from rlxf.trainer.state import save

    now = [100.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    clock = TrainClock()
    now[0] = 110.0
    assert not clock.out_of(100.0)

    class Placement:
        def save(self, directory: Path) -> None:
            now[0] += 50.0  # writing the models takes 50 s
            (directory / "model.bin").write_bytes(b"weights")

    class Sampler:
        def state_dict(self) -> dict:
            return {"position": 3}

    cfg = SimpleNamespace(checkpoint=SimpleNamespace(keep_last=2))
    state = SimpleNamespace(cfg=cfg, skipped=0, clock=clock)
    path = save(SimpleNamespace(checkpoints=tmp_path / "checkpoints"), Placement(), state, Sampler(), 1)
    saved = torch.load(path / STATE_FILE, weights_only=True)
    assert saved["clock"] == {"seconds": 60.0, "checked": 10.0, "budget": None}
    assert saved["sampler"] == {"position": 3} and saved["step"] == 1
