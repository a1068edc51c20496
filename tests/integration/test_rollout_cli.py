"""`rlxf generate` on the nano model: both backends, greedy outputs agree, bad input exits 2."""

from __future__ import annotations

from rlxf.cli.main import main


def test_generate_prints_samples_for_each_prompt(nano_model_dir, capsys):
    args = ["generate", str(nano_model_dir), "What is 2+2?", "Name a colour.", "--max-new-tokens", "8"]
    assert main(args) == 0
    native = capsys.readouterr()
    assert native.out.count("=== prompt") == 2 and native.out.count("--- sample 0") == 2
    assert "NativeEngine" in native.err
    assert main(args + ["--backend", "hf"]) == 0
    hf = capsys.readouterr()
    assert "HFEngine" in hf.err
    assert hf.out == native.out  # greedy: the same text from both engines


def test_generate_samples_n_per_prompt(nano_model_dir, capsys):
    assert main(["generate", str(nano_model_dir), "hi", "-n", "3", "--temperature", "1.0",
                 "--max-new-tokens", "4"]) == 0
    out = capsys.readouterr().out
    assert [f"--- sample {j}" in out for j in range(3)] == [True] * 3


def test_generate_rejects_bad_input(nano_model_dir, tmp_path, capsys):
    assert main(["generate", str(nano_model_dir), "hi", "--backend", "nope"]) == 2
    assert "valid backends: native, hf" in capsys.readouterr().err
    assert main(["generate", str(nano_model_dir), "hi", "--temperature", "-1"]) == 2
    assert main(["generate", str(tmp_path / "missing" / "model"), "hi"]) == 2
    assert "rlxf init-model" in capsys.readouterr().err
