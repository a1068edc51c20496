"""`linear_kernels: auto` picks what measured faster on this machine, once, cached (issue 17.15)."""

from __future__ import annotations

import json
from dataclasses import asdict, replace

import pytest
import torch
from torch import nn

from rlxf.models import kernel_choice as kc
from rlxf.models.kernels import OneDNNLinear, onednn_linear_works, use_fast_linears
from rlxf.rollout.native.kernels import OneDNNKernels, TorchKernels, select_kernels

CHOICE = kc.KernelChoice(
    trainer="torch", engine="onednn", pack=True,
    trainer_ms={"onednn": 3.0, "torch": 2.4}, engine_ms={"onednn": 1.0, "onednn_packed": 0.5, "torch": 0.8},
    cpu="Some CPU", torch_version=torch.__version__, threads=2)

needs_onednn = pytest.mark.skipif(not onednn_linear_works(), reason="no usable oneDNN linear in this torch build")


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """An empty per-machine cache under tmp_path; returns a function that writes a choice there."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(kc, "fallback_cache_dir", lambda: tmp_path / "fallback")

    def write(choice: kc.KernelChoice) -> None:
        path = kc.cache_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(choice)))
    return write


def test_reasons_say_what_was_picked_and_the_measurement_behind_it():
    # trainer: torch 2.4 ms vs oneDNN 3.0 ms -> torch, 3.0 / 2.4 = 1.25x
    # engine: packed oneDNN 0.5 ms vs torch 0.8 ms -> oneDNN, 1.60x; packing 1.0 / 0.5 = 2.00x
    trainer, engine, pack = CHOICE.reasons()
    assert trainer.startswith("trainer linear layers: torch") and "torch 2.400 ms vs onednn 3.000 ms, 1.25x" in trainer
    assert engine.startswith("engine matmuls: onednn") and "onednn 0.500 ms vs torch 0.800 ms, 1.60x" in engine
    assert pack.startswith("engine weight packing: on") and "2.00x" in pack


def test_measured_once_then_read_from_the_cache(tmp_path):
    calls = []

    def fake_measure():
        calls.append(1)
        return CHOICE

    path = tmp_path / "kernels-x.json"
    assert kc.machine_kernel_choice(path, fake_measure) == CHOICE
    assert kc.machine_kernel_choice(path, fake_measure) == CHOICE and len(calls) == 1
    # another process (no in-memory memo) reads the file instead of measuring
    assert kc._read(path) == CHOICE


def test_a_torn_cache_file_is_measured_again(tmp_path):
    path = tmp_path / "kernels-torn.json"
    path.write_text('{"trainer": "onednn", "eng')
    assert kc.machine_kernel_choice(path, lambda: CHOICE) == CHOICE
    assert kc._read(path) == CHOICE


def test_a_read_only_cache_dir_falls_back_to_the_temp_dir_and_neither_warns(tmp_path, monkeypatch, caplog):
    calls = []

    def fake_measure():
        calls.append(1)
        return CHOICE

    (tmp_path / "a_file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a_file"))  # ~/.cache/rlxf cannot be made
    monkeypatch.setattr(kc, "fallback_cache_dir", lambda: tmp_path / "fallback")
    assert kc.machine_kernel_choice(measure=fake_measure) == CHOICE
    assert kc._read(kc.cache_file(tmp_path / "fallback")) == CHOICE
    kc._cached.cache_clear()  # as a new process: reads the fallback instead of measuring
    assert kc.machine_kernel_choice(measure=fake_measure) == CHOICE and len(calls) == 1
    assert "could not save" not in caplog.text
    monkeypatch.setattr(kc, "fallback_cache_dir", lambda: tmp_path / "a_file" / "x")  # neither can be written
    assert kc.machine_kernel_choice(measure=fake_measure) == CHOICE and len(calls) == 2
    assert "could not save the kernel calibration" in caplog.text and "not bit-identical" in caplog.text


def test_cache_is_keyed_by_cpu_model_torch_version_and_threads(tmp_path, monkeypatch):
    here = kc.cache_file(tmp_path)
    monkeypatch.setattr(kc, "cpu_model", lambda: "Intel(R) Xeon(R) Platinum 8480+")
    intel = kc.cache_file(tmp_path)
    monkeypatch.setattr(torch, "__version__", "0.0.1")
    older = kc.cache_file(tmp_path)
    assert len({here, intel, older}) == 3 and all(p.parent == tmp_path for p in (here, intel, older))


@needs_onednn
def test_auto_trainer_layers_follow_the_measurement(machine):
    machine(CHOICE)                                   # torch measured faster here
    layer = nn.Linear(8, 8)
    assert use_fast_linears(layer, "auto") == 0 and type(layer) is nn.Linear
    assert use_fast_linears(layer, "onednn") == 1 and type(layer) is OneDNNLinear   # by hand: still possible


@needs_onednn
def test_auto_trainer_layers_use_onednn_where_it_measured_faster(machine):
    machine(replace(CHOICE, trainer="onednn"))
    layer = nn.Linear(8, 8)
    assert use_fast_linears(layer, "auto") == 1 and type(layer) is OneDNNLinear


@needs_onednn
def test_auto_engine_kernels_are_onednn_even_where_torch_measured_faster(machine):
    """A sequence's samples must not depend on its batch; MKL's rows round by batch size."""
    cpu, f32 = torch.device("cpu"), torch.float32
    machine(replace(CHOICE, engine="torch", pack=False))
    k = select_kernels(cpu, f32, "auto", pack=None)
    assert type(k) is OneDNNKernels and k._reorder is None  # packing still follows the measurement
    assert type(select_kernels(cpu, f32, "torch", pack=None)) is TorchKernels  # by hand: still possible
    assert "whether or not it is faster" in replace(CHOICE, engine="torch").reasons()[1]


@needs_onednn
def test_auto_packing_follows_the_measurement(tmp_path, monkeypatch, machine):
    cpu, f32 = torch.device("cpu"), torch.float32
    machine(CHOICE)  # oneDNN packed fastest
    k = select_kernels(cpu, f32, "auto", pack=None)
    assert type(k) is OneDNNKernels and k._reorder is not None
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "other"))
    machine(replace(CHOICE, pack=False, engine_ms={"onednn": 0.5, "onednn_packed": 1.0, "torch": 0.8}))
    k = select_kernels(cpu, f32, "auto", pack=None)
    assert type(k) is OneDNNKernels and k._reorder is None
    assert select_kernels(cpu, f32, "auto", pack=True)._reorder is not None  # asked for: packed
    assert select_kernels(cpu, f32, "onednn", pack=True)._reorder is not None  # an explicit choice wins


def test_real_calibration_is_consistent_with_its_own_figures():
    choice = kc.calibrate()
    assert choice.cpu == kc.cpu_model() and choice.torch_version == torch.__version__
    if not choice.trainer_ms:
        assert choice.trainer == choice.engine == "torch" and choice.note
        return
    t, e = choice.trainer_ms, choice.engine_ms
    assert choice.trainer == min(t, key=t.get)
    assert choice.pack == (e["onednn_packed"] < e["onednn"])
    assert choice.engine == ("onednn" if min(e["onednn"], e["onednn_packed"]) < e["torch"] else "torch")


def test_explain_lines_name_the_cache_and_each_choice(machine):
    machine(CHOICE)
    lines = kc.explain("auto", "cpu", "float32")
    assert "read from" in lines[0] and str(kc.cache_file()) in lines[0]
    assert lines[1].startswith("trainer linear layers: torch") and lines[2].startswith("engine matmuls: onednn")
    assert kc.explain("onednn", "cpu", "float32")[1] == "trainer linear layers: onednn (set by model.linear_kernels)"
    assert "not a CPU float32 model" in kc.explain("auto", "cpu", "bfloat16")[0]
