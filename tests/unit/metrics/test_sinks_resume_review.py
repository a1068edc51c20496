"""A resumed run logs on to the W&B / MLflow run it started, not a new one per resume."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from rlxf.errors import UserInputError
from rlxf.metrics.sinks import build_sinks, read_jsonl

SINK_RUNS = "sink_runs.json"  # next to metrics.jsonl


class _FakeWandb(types.ModuleType):
    """The wandb calls rlxf makes: init (its keyword arguments recorded), log, finish."""

    def __init__(self):
        super().__init__("wandb")
        self.inits = []

    def init(self, **kwargs):
        self.inits.append(kwargs)
        return SimpleNamespace(log=lambda metrics, step: None, finish=lambda: None)


class _FakeMlflow(types.ModuleType):
    """MLflow's run store as far as rlxf uses it: a new run per start_run without a run_id, and
    MlflowException's refusal to change a logged param."""

    def __init__(self):
        super().__init__("mlflow")
        self.runs: dict[str, dict] = {}
        self.active = None

    def set_experiment(self, name):
        pass

    def start_run(self, run_id=None, run_name=None):
        if run_id is None:
            run_id = f"run{len(self.runs)}"
            self.runs[run_id] = {"params": {}, "metrics": []}
        elif run_id not in self.runs:
            raise RuntimeError(f"no run {run_id}")
        self.active = run_id
        return SimpleNamespace(info=SimpleNamespace(run_id=run_id))

    def log_params(self, params):
        logged = self.runs[self.active]["params"]
        for k, v in params.items():
            if k in logged and logged[k] != v:
                raise RuntimeError(f"Changing param values is not allowed: {k}")
            logged[k] = v

    def log_metrics(self, metrics, step):
        self.runs[self.active]["metrics"].append((step, metrics))

    def end_run(self):
        self.active = None


def _start(tmp_path, sink, steps):
    out = build_sinks([sink], tmp_path, project="p", run_name="r", config={"train": {"steps": steps}})
    out.log(1, {"kl": 0.5})
    out.close()


def test_a_resumed_run_continues_its_wandb_run(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_RUN_ID", raising=False)
    fake = _FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    _start(tmp_path, "wandb", 4)
    _start(tmp_path, "wandb", 8)   # --resume, train.steps raised
    first, second = fake.inits
    assert first["id"] and second["id"] == first["id"]
    assert second["resume"] == "allow"
    other = _FakeWandb()             # another run directory: another W&B run
    monkeypatch.setitem(sys.modules, "wandb", other)
    (tmp_path / "other").mkdir()
    _start(tmp_path / "other", "wandb", 4)
    assert other.inits[0]["id"] != first["id"]


def test_a_wandb_sweeps_run_id_is_kept(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_RUN_ID", "sweep123")
    fake = _FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    _start(tmp_path, "wandb", 4)
    _start(tmp_path, "wandb", 4)
    assert [i["id"] for i in fake.inits] == ["sweep123", "sweep123"]


def test_a_resumed_run_continues_its_mlflow_run_with_changed_steps(tmp_path, monkeypatch):
    fake = _FakeMlflow()
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    _start(tmp_path, "mlflow", 4)
    _start(tmp_path, "mlflow", 8)   # changing a logged param used to be refused by MLflow
    assert list(fake.runs) == ["run0"]
    assert fake.runs["run0"]["params"] == {"train.steps": "4"}
    assert fake.runs["run0"]["metrics"] == [(1, {"kl": 0.5})]  # the resume's replay of step 1 is not sent again


@pytest.mark.parametrize("text", ["{not json", "[]", '{"wandb": 7}'])
def test_a_damaged_run_id_file_is_named(tmp_path, monkeypatch, text):
    monkeypatch.setitem(sys.modules, "wandb", _FakeWandb())
    (tmp_path / SINK_RUNS).write_text(text)
    with pytest.raises(UserInputError, match=rf"{SINK_RUNS}: not a JSON object of run ids.*delete it to log to a new"):
        build_sinks(["wandb"], tmp_path, project="p", run_name="r", config={})


class _RecordingWandb(_FakeWandb):
    """W&B that records what each run was sent, as (step, metrics)."""

    def __init__(self):
        super().__init__()
        self.logged: dict[str, list] = {}

    def init(self, **kwargs):
        self.inits.append(kwargs)
        logged = self.logged.setdefault(kwargs["id"], [])
        return SimpleNamespace(log=lambda metrics, step: logged.append((step, metrics)), finish=lambda: None)


def _killed_then_resumed(tmp_path, sink, first, replay):
    """A process logs ``first`` steps and is killed (no close); the resume logs ``replay``."""
    out = build_sinks([sink], tmp_path, project="p", run_name="r", config={})
    for step in first:
        out.log(step, {"loss": float(step)})
    out = build_sinks([sink], tmp_path, project="p", run_name="r", config={})
    for step in replay:
        out.log(step, {"loss": 10.0 + step})
    out.close()


def test_a_resume_does_not_send_mlflow_the_replayed_steps_again(tmp_path, monkeypatch):
    """Killed after step 3, resumed from the checkpoint of step 1: steps 2 and 3 are replayed.
    MLflow keeps every value sent, so they were drawn twice; metrics.jsonl is cut back instead."""
    fake = _FakeMlflow()
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    _killed_then_resumed(tmp_path, "mlflow", [0, 1, 2, 3], [2, 3, 4])
    assert [step for step, _ in fake.runs["run0"]["metrics"]] == [0, 1, 2, 3, 4]
    assert fake.runs["run0"]["metrics"][-1] == (4, {"loss": 14.0})
    assert [r["step"] for r in read_jsonl(tmp_path / "metrics.jsonl")] == [0, 1, 2, 3, 2, 3, 4]  # the loop cuts it


def test_a_resume_does_not_send_wandb_the_replayed_steps_again(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_RUN_ID", raising=False)
    fake = _RecordingWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    _killed_then_resumed(tmp_path, "wandb", [1, 2], [2, 3])
    (run_id,) = fake.logged
    assert fake.logged[run_id] == [(1, {"loss": 1.0}), (2, {"loss": 2.0}), (3, {"loss": 13.0})]


def test_one_process_may_send_a_step_twice_and_a_new_run_gets_every_step(tmp_path, monkeypatch):
    """SFT's final evaluation is a second record of its last step; deleting sink_runs.json
    (a new MLflow run) sends the replayed steps to the new run."""
    fake = _FakeMlflow()
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    _killed_then_resumed(tmp_path, "mlflow", [1, 2, 2], [])
    assert [step for step, _ in fake.runs["run0"]["metrics"]] == [1, 2, 2]
    (tmp_path / SINK_RUNS).unlink()
    _killed_then_resumed(tmp_path, "mlflow", [], [2, 3])
    assert [step for step, _ in fake.runs["run1"]["metrics"]] == [2, 3]


@pytest.mark.parametrize("text", ["{not json", "[]", '{"mlflow": 7}', '{"mlflow": {"run": "run0", "step": "2"}}'])
def test_a_damaged_sent_steps_file_is_named(tmp_path, monkeypatch, text):
    fake = _FakeMlflow()
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    (tmp_path / "sink_steps.json").write_text(text)
    with pytest.raises(UserInputError, match=r"sink_steps.json: not a JSON object of .*delete it to send"):
        build_sinks(["mlflow"], tmp_path, project="p", run_name="r", config={})
    assert fake.active is None  # refused before an MLflow run was started


def test_a_sink_that_fails_to_start_ends_the_ones_started_before_it(tmp_path, monkeypatch):
    """W&B refusing to start (no network, a bad key) left the MLflow run started before it running."""
    fake = _FakeMlflow()
    monkeypatch.setitem(sys.modules, "mlflow", fake)

    class _Offline(_FakeWandb):
        def init(self, **kwargs):
            raise ConnectionError("wandb.init: no network")

    monkeypatch.setitem(sys.modules, "wandb", _Offline())
    with pytest.raises(UserInputError, match=r"logging.sinks has 'wandb', and it could not start .*no network"):
        build_sinks(["mlflow", "wandb"], tmp_path, project="p", run_name="r", config={})
    assert list(fake.runs) == ["run0"] and fake.active is None


def test_a_sink_that_fails_to_close_does_not_leave_the_others_open(tmp_path, monkeypatch, caplog):
    """...nor ends a finished run with an error: the failure is said, metrics.jsonl is the record."""
    class _NoNetwork(_FakeWandb):
        def init(self, **kwargs):
            def finish():
                raise ConnectionError("wandb.finish: no network")
            return SimpleNamespace(log=lambda metrics, step: None, finish=finish)

    fake = _FakeMlflow()
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    monkeypatch.setitem(sys.modules, "wandb", _NoNetwork())
    out = build_sinks(["wandb", "mlflow"], tmp_path, project="p", run_name="r", config={})
    out.log(1, {"kl": 0.5})
    out.close()
    assert "'wandb' failed to close (ConnectionError: wandb.finish: no network)" in caplog.text
    assert fake.active is None                          # MLflow's run ended after W&B's failed
    assert out.sinks[0]._writer._fd == -1               # metrics.jsonl closed
