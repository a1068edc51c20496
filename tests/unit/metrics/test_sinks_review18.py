"""Outside sinks (MLflow, W&B, TensorBoard) are conveniences: their failures mid-run are said and
counted, never the end of a run; metrics.jsonl is the record."""

from __future__ import annotations

import errno
import json
import os
import re
import sys
import types
from types import SimpleNamespace

import pytest

from rlxf.errors import UserInputError
from rlxf.metrics.sinks import JsonlWriter, build_sinks, read_jsonl


class _Clock:
    """Seconds that a test sets: the retry pause is measured on it."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class _FlakyMlflow(types.ModuleType):
    """An MLflow that answers HTTP 503 while ``down``, and refuses metric names as MLflow does."""

    def __init__(self):
        super().__init__("mlflow")
        self.down = False
        self.attempts: list[int] = []
        self.logged: list[tuple[int, dict]] = []
        self.active = None

    def set_experiment(self, name):
        pass

    def start_run(self, run_id=None, run_name=None):
        self.active = run_id or "run0"
        return SimpleNamespace(info=SimpleNamespace(run_id=self.active))

    def log_params(self, params):
        for key in params:
            if not re.match(r"^[/\w.\- ]*$", key):
                raise ValueError(f"Invalid param name: '{key}'")

    def log_metrics(self, metrics, step):
        self.attempts.append(step)
        if self.down:
            raise ConnectionError("API request to http://mlflow:5000 failed: 503 Service Unavailable")
        for key in metrics:
            if not re.match(r"^[/\w.\- ]*$", key):
                raise ValueError(f"Invalid metric name: '{key}'")
        self.logged.append((step, metrics))

    def end_run(self):
        self.active = None


class _FlakyWandb(types.ModuleType):
    def __init__(self):
        super().__init__("wandb")
        self.down = False
        self.logged: list[int] = []

    def init(self, **kwargs):
        def log(metrics, step):
            if self.down:
                raise RuntimeError("The wandb backend process has shutdown")
            self.logged.append(step)

        def finish():
            raise RuntimeError("The wandb backend process has shutdown")

        return SimpleNamespace(log=log, finish=finish)


def _sinks(tmp_path, name, clock):
    out = build_sinks([name], tmp_path, project="p", run_name="r", config={})
    out.sinks[1].clock = clock
    return out


def test_a_tracking_server_outage_is_waited_out_not_fatal(tmp_path, monkeypatch, caplog):
    """Down at steps 2..4: tried at step 2 (t=1, next try no sooner than 1+10), at step 3 (t=11,
    next no sooner than 11+20: the pause doubles), not at step 4 (t=30), and again at step 5 (t=31)."""
    fake, clock = _FlakyMlflow(), _Clock()
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    out = _sinks(tmp_path, "mlflow", clock)
    for step, t, down in [(1, 0, False), (2, 1, True), (3, 11, True), (4, 30, True), (5, 31, False), (6, 32, False)]:
        clock.now, fake.down = t, down
        out.log(step, {"loss": float(step)})
    out.close()
    assert fake.attempts == [1, 2, 3, 5, 6]
    assert [step for step, _ in fake.logged] == [1, 5, 6]
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
    failed = [r.getMessage() for r in caplog.records if "failed at step" in r.getMessage()]
    assert len(failed) == 1 and "'mlflow' failed at step 2 (ConnectionError: API request" in failed[0]
    assert "metrics.jsonl has every step" in failed[0]
    assert "'mlflow' works again from step 5; it missed 3 steps (2-4)" in caplog.text
    assert "'mlflow' missed 3 steps (2-4) of this run" in caplog.text
    assert fake.active is None
    assert json.loads((tmp_path / "sink_missed.json").read_text()) == {"mlflow": [[2, 4]]}


def test_a_resume_says_what_the_killed_process_missed(tmp_path, monkeypatch, caplog):
    fake = _FlakyMlflow()
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    (tmp_path / "sink_missed.json").write_text('{"mlflow": [[2, 4], [9, 9]]}')
    build_sinks(["mlflow"], tmp_path, project="p", run_name="r", config={}).close()
    assert "'mlflow' missed 4 steps (2-4, 9) before this resume" in caplog.text


def test_a_damaged_missed_steps_file_is_named_before_a_run_starts(tmp_path, monkeypatch):
    fake = _FlakyMlflow()
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    (tmp_path / "sink_missed.json").write_text('{"mlflow": [2, 4]}')
    with pytest.raises(UserInputError, match=r"sink_missed.json: not a JSON object of .*delete it"):
        build_sinks(["mlflow"], tmp_path, project="p", run_name="r", config={})
    assert fake.active is None


def test_wandb_log_and_finish_failures_do_not_end_the_run(tmp_path, monkeypatch, caplog):
    monkeypatch.delenv("WANDB_RUN_ID", raising=False)
    fake, clock = _FlakyWandb(), _Clock()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    out = _sinks(tmp_path, "wandb", clock)
    fake.down = True
    out.log(1, {"kl": 0.1})
    clock.now, fake.down = 10, False
    out.log(2, {"kl": 0.2})
    out.close()                                 # finish fails too: said, not raised
    assert fake.logged == [2]
    assert "'wandb' failed to close (RuntimeError: The wandb backend process has shutdown)" in caplog.text
    assert "'wandb' missed 1 step (1) of this run" in caplog.text
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [1, 2]


def test_a_full_disk_under_tensorboard_is_survived_with_a_new_event_file(tmp_path, monkeypatch):
    """TensorBoard's writer keeps its thread's error and raises it at every call after, so the
    sink opens another writer (purging from the step it starts at) when it tries again."""
    writers = []

    class _Writer:
        full = False

        def __init__(self, log_dir, purge_step):
            self.purge_step, self.scalars, self.error, self.closed = purge_step, [], None, False
            writers.append(self)

        def add_scalar(self, key, value, step):
            if _Writer.full:
                self.error = OSError(28, "No space left on device")
            if self.error is not None:
                raise self.error
            self.scalars.append((key, step))

        def flush(self):
            if self.error is not None:
                raise self.error

        def close(self):
            self.closed = True
            self.flush()

    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", SimpleNamespace(SummaryWriter=_Writer))
    clock = _Clock()
    out = _sinks(tmp_path, "tensorboard", clock)
    for step, t, full in [(1, 0, False), (2, 1, True), (3, 11, False), (4, 12, False)]:
        clock.now, _Writer.full = t, full
        out.log(step, {"loss": 1.0})
    out.close()
    assert [w.purge_step for w in writers] == [1, 3]
    assert writers[0].scalars == [("loss", 1)] and writers[0].closed
    assert writers[1].scalars == [("loss", 3), ("loss", 4)] and writers[1].closed
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [1, 2, 3, 4]


def test_metric_names_with_the_users_characters_reach_mlflow(tmp_path, monkeypatch):
    """Verifier and source names, and the keys of options, are the user's; MLflow refused the whole
    call for one character it does not take: the start, or every step."""
    fake = _FlakyMlflow()
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    out = build_sinks(["mlflow"], tmp_path, project="p", run_name="r",
                      config={"env": {"options": {"tool@v2": {"max(tokens)": 8}}}})
    out.log(1, {"reward/judge(gpt-4o)": 0.5, "reward/exact+format": 1.0, "eval/pass@k": 0.25, "kl": 0.1})
    out.close()
    assert fake.logged == [(1, {"reward/judge_gpt-4o_": 0.5, "reward/exact_format": 1.0, "eval/pass_at_k": 0.25,
                                "kl": 0.1})]


def test_a_tracking_server_that_cannot_be_reached_at_start_is_a_clear_error(tmp_path, monkeypatch):
    class _Unreachable(_FlakyMlflow):
        def set_experiment(self, name):
            raise ConnectionError("HTTPConnectionPool(host='mlflow.bad', port=5000): Max retries exceeded")

    monkeypatch.setitem(sys.modules, "mlflow", _Unreachable())
    with pytest.raises(UserInputError, match=r"logging.sinks has 'mlflow', and it could not start \(ConnectionError: "
                                             r"HTTPConnectionPool\(host='mlflow.bad'.*check MLFLOW_TRACKING_URI.*"
                                             r"or remove 'mlflow' from logging.sinks"):
        build_sinks(["mlflow"], tmp_path, project="p", run_name="r", config={})


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full, a device that is always full")
def test_a_full_disk_under_metrics_jsonl_names_the_file():
    """metrics.jsonl is the record, so its failure does stop the run: saying which file filled."""
    writer = JsonlWriter("/dev/full", fsync=False)
    with pytest.raises(OSError, match=r"No space left on device: '/dev/full'") as e:
        writer.write({"step": 1})
    assert e.value.errno == errno.ENOSPC and e.value.filename == "/dev/full"
    writer.close()
