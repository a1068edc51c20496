"""A start stopped between making the run directory and its first step (Ctrl-C, a kill, an
out-of-memory kill while the model loads) leaves nothing that refuses the next run, and the
message printed on the way out names a command that works."""

from __future__ import annotations

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from rl_helpers import write_config

import rlxf.placement
import rlxf.run_dir
from rlxf.cli.main import main
from rlxf.run_dir import RunDir, RunDirError


def _ctrl_c(*args, **kwargs):
    raise KeyboardInterrupt


@pytest.mark.parametrize("command", ["train", "sft"])
def test_ctrl_c_right_after_the_directory_is_made_leaves_none(tmp_path, nano_model_dir, monkeypatch, capsys,
                                                                command):
    """The Ctrl-C lands in setup_logging, after RunDir.open and before the run's guard: the
    directory stayed behind, with run.json, so the same command was then refused as "already exists"."""
    monkeypatch.setattr(rlxf.run_dir, "setup_logging", _ctrl_c)
    cfg = write_config(tmp_path, nano_model_dir)
    assert main([command, str(cfg)]) == 130
    assert not (tmp_path / "runs" / "t").exists()
    assert "--resume" not in capsys.readouterr().err
    RunDir.check(tmp_path / "runs", "t", command=command)  # the same command is not refused


@pytest.mark.parametrize("command", ["rm", "dpo"])
def test_ctrl_c_right_after_the_directory_is_made_leaves_none_for_pairs(tmp_path, nano_model_dir, monkeypatch,
                                                                        command):
    from pref_helpers import pair_config

    monkeypatch.setattr(rlxf.run_dir, "setup_logging", _ctrl_c)
    cfg = pair_config(tmp_path, nano_model_dir, command, {"steps": 1, "batch_size": 2, "micro_batch_size": 2},
                      n_train=8, n_test=2)
    assert main([command, str(cfg)]) == 130
    assert not (tmp_path / "runs" / command).exists()


def test_ctrl_c_before_the_first_step_does_not_offer_a_resume_of_the_removed_run(tmp_path, nano_model_dir,
                                                                                  monkeypatch, capsys):
    """A fresh run's directory is removed when it stops before logging anything, so `--resume`
    (which the message used to offer) fails with "does not exist": it says to run it again."""
    monkeypatch.setattr(rlxf.placement, "run_training", _ctrl_c)
    cfg = write_config(tmp_path, nano_model_dir)
    assert main(["train", str(cfg), "train.steps=3"]) == 130
    assert not (tmp_path / "runs" / "t").exists()
    err = capsys.readouterr().err
    assert f"run it again with: rlxf train {cfg} train.steps=3\n" in err
    assert "--resume" not in err


def _abandoned(runs, name: str = "t"):
    """What a start killed (kill -9, out of memory) before its first step leaves: the record, the
    empty checkpoints/ and a log, and a lock no process holds any more."""
    run = RunDir.open(runs, name, command="train")
    run.log.write_text("12:00:00 INFO rlxf: run directory ...\n")
    run.release()  # as the kernel does when the process dies
    return run.path


def test_a_start_that_died_before_its_first_step_does_not_refuse_the_next(tmp_path, caplog):
    path = _abandoned(tmp_path)
    assert RunDir.check(tmp_path, "t", command="train") == path
    with caplog.at_level("WARNING", logger="rlxf"):
        run = RunDir.open(tmp_path, "t", command="train")
    assert sorted(p.name for p in path.iterdir()) == [".lock", "checkpoints", "run.json"]  # the old log is gone
    assert "a start that stopped before its first step" in caplog.text
    run.release()


def test_a_run_that_logged_or_saved_or_is_in_use_is_still_refused(tmp_path):
    logged = _abandoned(tmp_path, "logged")
    (logged / "metrics.jsonl").write_text('{"step": 1}\n')
    saved = _abandoned(tmp_path, "saved")
    (saved / "checkpoints" / "step_2").mkdir()
    running = RunDir.open(tmp_path, "running", command="train")  # held by this process: starting
    for name in ("logged", "saved", "running"):
        with pytest.raises(RunDirError, match="already exists"):
            RunDir.check(tmp_path, name, command="train")
    running.release()
    # another user's directory that only looks empty is never touched
    mine = tmp_path / "mine"
    (mine / "checkpoints").mkdir(parents=True)
    (mine / "train.log").write_text("")
    os.chmod(mine, 0o755)
    with pytest.raises(RunDirError, match="already exists"):
        RunDir.check(tmp_path, "mine", command="train")


def test_ctrl_c_before_the_first_step_of_an_overwrite_says_the_old_run_is_back(tmp_path, nano_model_dir,
                                                                                monkeypatch, capsys):
    """--overwrite, stopped before the first step: the old run is put back, so the message used to
    offer `--resume` "from" the old run's checkpoint; the command to repeat is the --overwrite."""
    monkeypatch.setattr(rlxf.placement, "run_training", _ctrl_c)
    cfg = write_config(tmp_path, nano_model_dir)
    old = RunDir.open(tmp_path / "runs", "t", command="train")
    (old.checkpoints / "step_5").mkdir()
    old.release()
    assert main(["train", str(cfg), "--overwrite"]) == 130
    assert (tmp_path / "runs" / "t" / "checkpoints" / "step_5").is_dir()
    err = capsys.readouterr().err
    assert f"the run it was to replace put back; run it again with: rlxf train {cfg} --overwrite\n" in err
    assert "--resume" not in err


def test_ctrl_c_inside_open_puts_the_old_run_back(tmp_path, monkeypatch):
    """--overwrite moves the old run aside first; a Ctrl-C before the new directory was complete
    left the old run hidden as .t.replaced-PID (deleted by the next start) and a half-made run."""
    old = RunDir.open(tmp_path, "t", command="train")
    (old.checkpoints / "step_5").mkdir()
    old.release()
    monkeypatch.setattr(rlxf.run_dir, "json", SimpleNamespace(dumps=_ctrl_c))  # run.json is written last
    with pytest.raises(KeyboardInterrupt):
        RunDir.open(tmp_path, "t", overwrite=True, command="train")
    assert (tmp_path / "t" / "checkpoints" / "step_5").is_dir()
    assert [p.name for p in tmp_path.iterdir()] == ["t"]


def test_a_directory_another_start_took_first_is_left_alone(tmp_path, monkeypatch):
    """Two starts find one abandoned directory: the one that loses the lock stops with "in use"
    and removes nothing of the winner's."""
    path = _abandoned(tmp_path)

    def taken(p):
        raise rlxf.run_dir._in_use(p, "process 1")

    monkeypatch.setattr(rlxf.run_dir, "_lock", taken)
    with pytest.raises(RunDirError, match="in use by process 1"):
        RunDir.open(tmp_path, "t", command="train")
    assert sorted(p.name for p in path.iterdir()) == [".lock", "checkpoints", "run.json", "train.log"]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", ""])
    proc.wait()
    return proc.pid


def test_an_overwrite_killed_before_its_first_step_gives_the_old_run_back(tmp_path):
    """--overwrite sets the old run aside (.t.replaced-PID) and deletes it once the new run has
    started. Killed before that (out of memory while loading), the next start deleted the old run
    as an orphan of a dead process, though the new one had nothing: it is put back instead."""
    old = RunDir.open(tmp_path, "t", command="train")
    (old.checkpoints / "step_5").mkdir()
    old.release()
    (tmp_path / "t").rename(tmp_path / f".t.replaced-{_dead_pid()}")
    new = tmp_path / "t"  # the new run, as the kill left it
    (new / "checkpoints").mkdir(parents=True)
    for name, text in (("run.json", '{"command": "train"}\n'), (".lock", "1\n"), ("train.log", "")):
        (new / name).write_text(text)
    with pytest.raises(RunDirError, match="already exists"):  # the old run is back, and a new start is refused
        RunDir.check(tmp_path, "t", command="train")
    assert (tmp_path / "t" / "checkpoints" / "step_5").is_dir()
    assert [p.name for p in tmp_path.iterdir()] == ["t"]
    RunDir.open(tmp_path, "t", resume=True, command="train").release()  # and --resume continues it
