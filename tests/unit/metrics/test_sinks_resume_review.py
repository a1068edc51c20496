"""A resumed run logs on to the W&B / MLflow run it started, not a new one per resume."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from rlxf.errors import UserInputError
from rlxf.metrics.sinks import build_sinks

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
    assert fake.runs["run0"]["metrics"] == [(1, {"kl": 0.5}), (1, {"kl": 0.5})]


@pytest.mark.parametrize("text", ["{not json", "[]", '{"wandb": 7}'])
def test_a_damaged_run_id_file_is_named(tmp_path, monkeypatch, text):
    monkeypatch.setitem(sys.modules, "wandb", _FakeWandb())
    (tmp_path / SINK_RUNS).write_text(text)
    with pytest.raises(UserInputError, match=rf"{SINK_RUNS}: not a JSON object of run ids.*delete it to log to a new"):
        build_sinks(["wandb"], tmp_path, project="p", run_name="r", config={})
