"""TrainClock: the training time a time budget counts, carried across --resume."""

from __future__ import annotations

import time
from pathlib import Path

from rlxf.trainer.state import TrainClock


def test_the_clock_counts_on_from_the_checkpoints_time(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    saved = TrainClock()
    now[0] = 130.0
    assert not saved.out_of(40.0)          # 30 s of 40
    now[0] = 135.0
    state = saved.state_dict()
    assert state == {"seconds": 35.0, "checked": 30.0}
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
