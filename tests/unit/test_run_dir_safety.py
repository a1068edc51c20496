"""What a command may do to a directory: every failed start leaves none behind, --overwrite
deletes only a run, --resume continues only a run of the same command, and a run directory that
cannot be made names run.output_dir / run.name (exit 2, never a raw OSError)."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlxf.cli.main import main
from rlxf.run_dir import RunDir, RunDirError


@pytest.fixture
def isolated_path(monkeypatch):
    """Config loading appends the config's directory to sys.path; undo it after the test."""
    monkeypatch.setattr(sys, "path", list(sys.path))


def _config(directory: Path, model: Path | str, *, data: str = "{task: arithmetic}", name: str = "r") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.yaml"
    path.write_text(textwrap.dedent(f"""\
        run: {{name: {name}, output_dir: {directory / 'runs'}}}
        model: {{path: {model}}}
        data: {data}
        rollout: {{n: 2, max_new_tokens: 4, temperature: 1.0}}
        reward: {{verifiers: [{{type: numeric}}]}}
        train: {{steps: 1, prompts_per_step: 2}}
        logging: {{progress: false}}
        """))
    return path


def _pairs(path: Path, **record) -> Path:
    path.write_text(json.dumps({"prompt": "say 1", "chosen": "ONE", "rejected": "one", **record}) + "\n")
    return path


def _users_files(directory: Path) -> Path:
    directory.mkdir(parents=True)
    (directory / "notes.txt").write_text("mine\n")
    return directory


# --- RunDir itself ---------------------------------------------------------------------------


def test_overwrite_deletes_a_run_but_not_a_directory_that_is_not_one(tmp_path):
    junk = _users_files(tmp_path / "junk")
    with pytest.raises(RunDirError, match=r"--overwrite: .*junk is not an rlxf run directory.*not deleted"):
        RunDir.open(tmp_path, "junk", overwrite=True)
    assert (junk / "notes.txt").read_text() == "mine\n"

    run = RunDir.open(tmp_path, "run", command="train")
    run.config.write_text("run: {}\n")
    (run.path / "metrics.jsonl").write_text('{"step": 1}\n')
    again = RunDir.open(tmp_path, "run", overwrite=True, command="train")
    assert not again.metrics.exists() and again.checkpoints.is_dir()
    # a run from before run.json, stopped before its config: its log and checkpoints/ mark it
    old = tmp_path / "old"
    (old / "checkpoints").mkdir(parents=True)
    (old / "train.log").write_text("")
    RunDir.open(tmp_path, "old", overwrite=True)


def test_resume_refuses_a_directory_that_is_not_a_run_and_accepts_one_without_checkpoints(tmp_path):
    junk = _users_files(tmp_path / "junk")
    with pytest.raises(RunDirError, match=r"--resume: .*junk is not an rlxf run directory"):
        RunDir.open(tmp_path, "junk", resume=True)
    assert sorted(p.name for p in junk.iterdir()) == ["notes.txt"]
    # killed before its first checkpoint: its config and checkpoints/ are there, so it resumes (from step 0)
    killed = tmp_path / "killed"
    (killed / "checkpoints").mkdir(parents=True)
    (killed / "config.yaml").write_text("run: {}\n")
    assert RunDir.open(tmp_path, "killed", resume=True, command="train").path == killed


def test_a_run_records_its_command_and_resumes_only_with_it(tmp_path):
    run = RunDir.open(tmp_path, "s", command="sft")
    assert json.loads(run.record.read_text()) == {"command": "sft"}
    with pytest.raises(RunDirError, match=r"is a run of `rlxf sft`, not `rlxf train`; continue it with `rlxf sft"):
        RunDir.check(tmp_path, "s", resume=True, command="train")
    RunDir.check(tmp_path, "s", resume=True, command="sft")
    run.record.unlink()  # a run from before the record: resumes with any command (its checkpoint decides)
    run.config.write_text("run: {}\n")
    RunDir.check(tmp_path, "s", resume=True, command="train")


def test_a_run_directory_that_cannot_be_made_names_the_fields(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    with pytest.raises(RunDirError, match=r"run\.output_dir/run\.name: .*a_file is a file, not a directory"):
        RunDir.check(a_file, "r")
    with pytest.raises(RunDirError, match=r"run\.output_dir/run\.name: .*a_file is a file, not a run directory"):
        RunDir.check(tmp_path, "a_file")
    with pytest.raises(RunDirError, match=r"run\.output_dir/run\.name: .*a_file is a file"):
        RunDir.open(tmp_path / "a_file" / "deeper", "r", command="train")


def test_overwrite_refuses_a_project_directory_that_only_holds_a_config(tmp_path):
    """A user's project with its config.yaml, code and notes is not a run: only run.json, or a
    config.yaml beside a run's log, metrics or checkpoints/, makes one."""
    project = _users_files(tmp_path / "proj")
    (project / "config.yaml").write_text("run: {}\n")
    (project / "train_utils.py").write_text("x = 1\n")
    with pytest.raises(RunDirError, match=r"--overwrite: .*proj is not an rlxf run directory"):
        RunDir.open(tmp_path, "proj", overwrite=True)
    assert sorted(p.name for p in project.iterdir()) == ["config.yaml", "notes.txt", "train_utils.py"]


HOLD = """
import sys, time
from rlxf.run_dir import RunDir
RunDir.open(sys.argv[1], "held", resume=sys.argv[2] == "resume", command="train")
print("held", flush=True)
time.sleep(60)
"""


def test_a_second_process_is_refused_a_run_directory_in_use_until_the_first_is_gone(tmp_path):
    """Two processes in one run directory deleted each other's checkpoint files and lost
    metrics; the second is refused (resume or overwrite alike) while the first lives, and the
    kernel frees the lock when it dies, kill -9 included."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path), "new"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        for flags in ({"resume": True}, {"overwrite": True}):
            with pytest.raises(RunDirError, match=rf"held is in use by process {holder.pid} "):
                RunDir.open(tmp_path, "held", command="train", **flags)
        assert (tmp_path / "held" / "run.json").exists()    # the refused --overwrite deleted nothing
    finally:
        holder.kill()
        holder.wait()
    RunDir.open(tmp_path, "held", resume=True, command="train")
    RunDir.open(tmp_path, "held", resume=True, command="train")   # this process again: its own lock


def test_overwrite_puts_the_old_run_back_when_the_new_one_fails_to_start(tmp_path):
    from rlxf.cli.train import discard_on_failed_start

    old = RunDir.open(tmp_path, "r", command="train")
    (old.path / "metrics.jsonl").write_text('{"step": 1}\n')
    new = RunDir.open(tmp_path, "r", overwrite=True, command="train")
    assert not new.metrics.exists() and new.replaced.exists()
    with pytest.raises(ValueError), discard_on_failed_start(new, fresh=True):
        raise ValueError("bad data found after the directory was made")
    assert (tmp_path / "r" / "metrics.jsonl").read_text() == '{"step": 1}\n'
    assert not new.replaced.exists()
    # a start that succeeds deletes the old run it replaced
    newer = RunDir.open(tmp_path, "r", overwrite=True, command="train")
    with discard_on_failed_start(newer, fresh=True):
        newer.metrics.write_text('{"step": 7}\n')
    assert not newer.replaced.exists() and newer.metrics.read_text() == '{"step": 7}\n'
    # one set aside by a process that was killed since is swept by the next open
    stale = tmp_path / ".r.replaced-999999999"
    stale.mkdir()
    RunDir.open(tmp_path, "r", resume=True, command="train")
    assert not stale.exists()


def test_a_failed_start_keeps_a_directory_that_holds_records(tmp_path):
    run = RunDir.open(tmp_path, "label", command="label")
    (run.path / "pairs_train.jsonl").write_text('{"prompt": "p"}\n')
    assert not run.discard_if_unused() and run.path.exists()
    empty = RunDir.open(tmp_path, "x", command="label")
    (empty.path / "pairs_train.jsonl").write_text("")
    assert empty.discard_if_unused() and not empty.path.exists()


# --- the commands ----------------------------------------------------------------------------


def test_train_overwrite_and_resume_leave_a_users_directory_alone(tmp_path, capsys, isolated_path):
    path = _config(tmp_path, "m", name="junk")
    junk = _users_files(tmp_path / "runs" / "junk")
    for flag in ("--overwrite", "--resume"):
        assert main(["train", str(path), flag]) == 2
        assert "is not an rlxf run directory" in capsys.readouterr().err
        assert sorted(p.name for p in junk.iterdir()) == ["notes.txt"]


def test_unusable_output_dir_exits_2_naming_the_field(tmp_path, capsys, isolated_path):
    path = _config(tmp_path, "m")
    (tmp_path / "a_file").write_text("x")
    for override in (f"run.output_dir={tmp_path / 'a_file'}", f"run.output_dir={tmp_path}", "run.output_dir=/proc/self"):
        assert main(["train", str(path), override, "run.name=a_file"]) == 2
        assert "run.output_dir/run.name" in capsys.readouterr().err


@pytest.mark.parametrize("kind", ["rm", "dpo"])
def test_preference_start_failures_leave_no_run_directory(tmp_path, capsys, nano_model_dir, kind, isolated_path):
    path = _config(tmp_path, nano_model_dir)  # data.task: preference commands need pairs
    missing = tmp_path / "missing.jsonl"
    no_chosen = _pairs(tmp_path / "bad.jsonl", chosen=None)
    json_line = json.loads(no_chosen.read_text())
    del json_line["chosen"]
    no_chosen.write_text(json.dumps(json_line) + "\n")
    for overrides, said in (([], "not from a procedural task"),
                            (["data.source=jsonl", f"data.train_path={missing}"], str(missing)),
                            (["data.source=jsonl", f"data.train_path={no_chosen}"], "chosen")):
        assert main([kind, str(path), *overrides]) == 2, overrides
        assert said in capsys.readouterr().err
        assert not (tmp_path / "runs" / "r").exists()
    # a failure after the directory exists (no pair fits max_prompt_len) removes it too
    good = _pairs(tmp_path / "good.jsonl")
    assert main([kind, str(path), "data.source=jsonl", f"data.train_path={good}", "data.max_prompt_len=1",
                 "data.overlong_prompt=drop"]) == 2
    assert not (tmp_path / "runs" / "r").exists()


def test_label_start_failures_leave_no_run_directory(tmp_path, capsys, nano_model_dir, isolated_path):
    path = _config(tmp_path, nano_model_dir)
    assert main(["label", str(path), f"model.path={tmp_path / 'no_model'}"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "runs" / "r").exists()
    assert main(["label", str(path), "rollout.temperature=0"]) == 2  # refused by the labeller itself
    assert "rollout.temperature" in capsys.readouterr().err
    assert not (tmp_path / "runs" / "r").exists()
    # nor a log handler on the removed train.log, which a later run in this process would hit
    files = [h.baseFilename for h in logging.getLogger("rlxf").handlers if isinstance(h, logging.FileHandler)]
    assert not any(f.startswith(str(tmp_path)) for f in files)


def test_quickstart_checks_its_arguments_before_making_out(tmp_path, capsys):
    out = tmp_path / "qs"
    for args, said in ((["--preset", "huge"], "unknown preset 'huge'"),
                       (["--sft-steps", "-5"], "--sft-steps"), (["--rl-steps", "0"], "--rl-steps")):
        assert main(["quickstart", str(out), *args]) == 2, args
        captured = capsys.readouterr()
        assert said in captured.err + captured.out
        assert not out.exists()
    from rlxf.cli.quickstart import run_quickstart
    from rlxf.config import ConfigError

    with pytest.raises(ConfigError, match="train.steps"):  # 0 is not "the recipe's default"
        run_quickstart(out, rl_steps=0)
    assert not out.exists()
    junk = _users_files(tmp_path / "junk")
    assert main(["quickstart", str(junk), "--overwrite"]) == 2
    assert "not a quickstart directory" in capsys.readouterr().err
    assert sorted(p.name for p in junk.iterdir()) == ["notes.txt"]


def test_serve_reward_port_errors_exit_2(tmp_path, capsys, isolated_path):
    path = tmp_path / "reward.yaml"
    path.write_text("reward: {verifiers: [{type: numeric}]}\n")
    for port in ("99999", "-1"):
        assert main(["serve-reward", str(path), "--port", port]) == 2
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        capsys.readouterr()
        assert main(["serve-reward", str(path), "--port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"cannot serve on --host 127.0.0.1 --port {port}" in err and "serving verifiers" not in err


def test_missing_run_paths_say_they_do_not_exist(tmp_path, capsys, monkeypatch, isolated_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    assert main(["generate", "runs/nonexist", "hi"]) == 2
    err = capsys.readouterr().err
    assert "runs/nonexist does not exist" in err and "tokenizer" not in err
    path = _config(tmp_path, "m")
    assert main(["eval", str(path), "--checkpoint", "runs/nonexist"]) == 2
    assert "runs/nonexist does not exist" in capsys.readouterr().err
    run = tmp_path / "runs" / "done"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n')
    assert main(["report", str(run), "--out", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err
