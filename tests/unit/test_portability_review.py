"""What users of other entry points and machines meet: `rlxf generate` on a LoRA adapter directory,
and run-directory errors worded for the caller (`--resume` on the command line, `resume=True` in
``rlxf.train``)."""

from __future__ import annotations

import pytest

from rlxf.cli.main import main
from rlxf.run_dir import API_OPTIONS, RunDir, RunDirError


def test_generate_reads_a_lora_adapter_directory_through_its_base(nano_model_dir, tmp_path, capsys):
    from peft import LoraConfig, get_peft_model

    from rlxf.models.loading import load_model

    base = load_model(nano_model_dir, device="cpu", dtype="float32")
    get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(tmp_path / "adapter")
    assert main(["generate", str(tmp_path / "adapter"), "1+2=", "--max-new-tokens", "2"]) == 0
    assert "--- sample 0 (" in capsys.readouterr().out


def test_run_dir_errors_name_the_options_as_the_python_api_spells_them(tmp_path):
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "run" / "config.yaml").write_text("{}\n")
    with pytest.raises(RunDirError) as e:
        RunDir.check(tmp_path, "run", options=API_OPTIONS)
    assert "Pass resume=True to continue that run, overwrite=True to delete it" in str(e.value)
    assert "--" not in str(e.value).replace(str(tmp_path), "")
    with pytest.raises(RunDirError, match=r"^resume=True: .*missing does not exist"):
        RunDir.check(tmp_path, "missing", resume=True, options=API_OPTIONS)
    with pytest.raises(RunDirError, match=r"^--resume: "):   # the command line's spelling by default
        RunDir.check(tmp_path, "missing", resume=True)


def test_python_dash_m_rlxf_runs_the_command_line():
    import subprocess
    import sys

    import rlxf

    done = subprocess.run([sys.executable, "-m", "rlxf", "--version"], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout.strip()) == (0, f"rlxf {rlxf.__version__}")


def test_init_model_into_an_unwritable_place_is_a_usage_error(tmp_path, capsys, monkeypatch, tokenizer_for_tests):
    from rlxf.models import factory

    monkeypatch.setattr(factory, "train_tokenizer", lambda: tokenizer_for_tests)
    (tmp_path / "file").write_text("")
    assert main(["init-model", "--preset", "nano", str(tmp_path / "file" / "m")]) == 2
    err = capsys.readouterr().err
    assert "cannot write the model to" in err and "file/m" in err and "give a directory you can write to" in err


def test_eval_says_its_results_were_not_saved_when_the_run_cannot_be_written(tmp_path):
    from types import SimpleNamespace

    from rlxf.cli.errors import UsageError
    from rlxf.cli.evaluate import _save

    (tmp_path / "eval.jsonl").mkdir()   # stands for a read-only run directory (root writes anywhere)
    with pytest.raises(UsageError, match=r"results above were not appended to .*eval\.jsonl \(Is a directory\)"):
        _save(SimpleNamespace(run=tmp_path), {"eval/accuracy": 1.0})


def test_the_kernel_choice_is_cached_per_instruction_set_setting(monkeypatch):
    from rlxf.models.kernel_choice import cache_file

    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    default = cache_file()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")   # measured slower/faster under another ISA: another file
    assert cache_file() != default
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    assert cache_file() == default


def test_logs_piped_to_a_file_keep_each_record_on_one_line(capsys):
    import logging

    from rlxf.run_dir import setup_logging

    logger = logging.getLogger("rlxf")
    kept = (list(logger.handlers), logger.propagate, logger.level)
    path = "/tmp/a run dir with spaces/" + "x" * 60 + "/checkpoints/step_2"
    try:
        setup_logging(None).info("saved checkpoint %s", path)   # pytest's stderr is not a terminal
    finally:
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        for handler in kept[0]:
            logger.addHandler(handler)
        logger.propagate, logger.level = kept[1], kept[2]
    assert f"INFO saved checkpoint {path}\n" in capsys.readouterr().err


def test_a_remote_reward_without_httpx_names_the_extra(monkeypatch):
    import sys

    from rlxf.errors import MissingExtraError, UserInputError
    from rlxf.rewards.scorer import RemoteReward

    monkeypatch.setitem(sys.modules, "httpx", None)   # `pip install -e .` without [serve]
    with pytest.raises(MissingExtraError, match=r"reward\.url \(http://rm:8000\) needs httpx.*rlxf\[serve\]") as e:
        RemoteReward("http://rm:8000")
    assert isinstance(e.value, UserInputError) and isinstance(e.value, ImportError)   # exit 2, and still an ImportError


def test_an_ascii_stdout_gets_escapes_instead_of_a_crash(monkeypatch):
    import io
    import sys

    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="ascii")   # PYTHONIOENCODING=ascii, a legacy locale
    monkeypatch.setattr(sys, "stdout", out)
    assert main(["config-docs"]) == 0   # its docs hold σ and μ
    out.flush()
    assert b"\\u03c3(r)" in raw.getvalue()


def test_the_default_reward_without_its_extra_is_a_user_error(monkeypatch):
    """The math verifier is the default reward: without [tasks] a plain install ended with a bare
    ImportError (exit 1) and a resume hint; every optional extra is now named as a user error."""
    import sys

    from rlxf.errors import MissingExtraError
    from rlxf.rewards.answers import MathVerifier

    monkeypatch.setitem(sys.modules, "math_verify", None)
    with pytest.raises(MissingExtraError, match=r"rlxf\[tasks\]"):
        MathVerifier("math")


def test_rlxf_train_speaks_of_its_own_arguments(tmp_path):
    import rlxf
    from rlxf.run_dir import RunDirError

    with pytest.raises(RunDirError, match=r"^resume=True: .* does not exist"):
        rlxf.train({"model": {"path": "m"}, "data": {"task": "arithmetic"}},
                   run={"name": "nothing", "output_dir": str(tmp_path)}, resume=True)
