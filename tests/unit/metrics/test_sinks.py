"""metrics.jsonl: whole records only, even when the writer is killed mid-run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types

import pytest

from rlxf.metrics.sinks import (
    JsonlWriter,
    MultiSink,
    NullSink,
    build_sinks,
    read_jsonl,
    repair_tail,
    truncate_after_step,
)

WRITER = """
import sys
from rlxf.metrics.sinks import JsonlSink
sink = JsonlSink(sys.argv[1])
step = 0
payload = "x" * 3000   # lines larger than a page, so a torn write would show
while True:
    step += 1
    sink.log(step, {"reward/mean": step * 0.5, "blob": payload})
"""


def test_killed_writer_leaves_only_whole_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    for _ in range(3):  # kill it several times, appending after each restart
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)])
        deadline = time.time() + 20
        while (not path.exists() or path.stat().st_size < 50_000) and time.time() < deadline:
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    raw = path.read_bytes()
    # SIGKILL can cut the record being written short (Linux checks for a fatal signal between
    # the pages of a write), so only the last line may be torn; each restart cut the previous
    # run's torn tail off before appending, so every earlier line is a whole record
    *lines, tail = raw.split(b"\n")
    assert len(lines) > 10
    records = [json.loads(line) for line in lines]
    assert all(rec["reward/mean"] == rec["step"] * 0.5 for rec in records)
    try:   # the kill can land between a record's "}" and its newline: that record is whole, and kept
        whole_tail = [json.loads(tail)] if tail else []
    except ValueError:
        whole_tail = []
    assert read_jsonl(path) == records + whole_tail  # a reader skips a torn tail
    JsonlWriter(path).close()                        # the next writer cuts it off (or ends its line)
    assert path.read_bytes() == (raw + b"\n" if whole_tail else raw[:len(raw) - len(tail)])


def test_torn_tail_is_repaired_before_appending(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"step": 1, "a": 1}\n{"step": 2, "a"')   # a crash mid-line
    w = JsonlWriter(path)
    w.write({"step": 2, "a": 2})
    w.close()
    assert read_jsonl(path) == [{"step": 1, "a": 1}, {"step": 2, "a": 2}]
    assert repair_tail(path) == 0


def test_read_ignores_torn_last_line(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"step": 1}\n{"step": 2')
    assert read_jsonl(path) == [{"step": 1}]


def test_truncate_after_step_for_resume(tmp_path):
    path = tmp_path / "m.jsonl"
    w = JsonlWriter(path)
    for s in range(1, 6):
        w.write({"step": s})
    w.close()
    assert truncate_after_step(path, 3) == 2
    assert [r["step"] for r in read_jsonl(path)] == [1, 2, 3]
    assert truncate_after_step(path, 3) == 0


def test_non_finite_values_stay_valid_json(tmp_path):
    path = tmp_path / "m.jsonl"
    w = JsonlWriter(path)
    w.write({"step": 1, "loss": float("nan"), "x": float("inf")})
    w.close()
    assert read_jsonl(path) == [{"step": 1, "loss": "nan", "x": "inf"}]


def test_build_sinks_jsonl_always(tmp_path):
    sink = build_sinks([], tmp_path, project="p", run_name="r", config={})
    sink.log(1, {"a": 1.0})
    sink.close()
    assert read_jsonl(tmp_path / "metrics.jsonl") == [{"step": 1, "a": 1.0}]


def test_multi_and_null_sinks_fan_out():
    seen = []

    class Recorder:
        def log(self, step, metrics):
            seen.append((step, metrics))

        def close(self):
            seen.append("closed")

    sink = MultiSink([Recorder(), NullSink(), Recorder()])
    sink.log(4, {"k": 2.0})
    sink.close()
    assert seen == [(4, {"k": 2.0}), (4, {"k": 2.0}), "closed", "closed"]


def test_tensorboard_sink_writes_events(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sink = build_sinks(["tensorboard"], tmp_path, project="p", run_name="r", config={})
    for step in (1, 2):
        sink.log(step, {"reward/mean": 0.5 * step})
    sink.close()
    acc = EventAccumulator(str(tmp_path / "tensorboard"))
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("reward/mean")] == [(1, 0.5), (2, 1.0)]


class _FakeWandb(types.ModuleType):
    """A stand-in for the wandb package that records what rlxf asks of it."""

    def __init__(self):
        super().__init__("wandb")
        self.calls = []

    def init(self, **kwargs):
        self.calls.append(("init", kwargs["project"], kwargs["name"]))
        fake = self

        class Run:
            def log(self, metrics, step):
                fake.calls.append(("log", step, dict(metrics)))

            def finish(self):
                fake.calls.append(("finish",))
        return Run()


def test_wandb_sink_through_a_fake_package(tmp_path, monkeypatch):
    fake = _FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    sink = build_sinks(["wandb"], tmp_path, project="proj", run_name="run", config={"a": 1})
    sink.log(3, {"kl": 0.1})
    sink.close()
    assert fake.calls == [("init", "proj", "run"), ("log", 3, {"kl": 0.1}), ("finish",)]
    assert read_jsonl(tmp_path / "metrics.jsonl") == [{"step": 3, "kl": 0.1}]


def test_missing_sink_package_is_an_error_naming_the_extra(tmp_path, monkeypatch):
    # issue 17.17: it was a warning, and the run went on without its dashboard
    from rlxf.errors import UserInputError

    monkeypatch.setitem(sys.modules, "mlflow", None)   # import mlflow -> ImportError
    with pytest.raises(UserInputError, match=r"pip install 'rlxf\[mlflow\]'.*remove 'mlflow' from logging.sinks"):
        build_sinks(["mlflow"], tmp_path, project="p", run_name="r", config={})


def test_config_rejects_a_sink_that_is_not_installed(monkeypatch):
    import importlib.util

    from rlxf.config import ConfigError, load_config

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    base = {"model": {"path": "m"}, "data": {"task": "arithmetic"}}
    with pytest.raises(ConfigError, match=r"logging.sinks.*'wandb' is not installed: pip install 'rlxf\[wandb\]'"):
        load_config(None, ["logging.sinks=[wandb]"], base=base)
    assert load_config(None, [], base=base).logging.sinks == []
