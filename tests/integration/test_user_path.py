"""The user's path through a run's life: seeds, interruption, damaged checkpoints (issue 17)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from rl_helpers import HERE, REPO, caught_outside, metrics, signal_after_first, write_config

from rlxf.cli.main import main


def _samples(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]


def test_rollout_seed_changes_samples_but_not_data(tmp_path, nano_model_dir):
    """Two runs that differ only in rollout.seed (None vs 1) train on the same prompts in the
    same order and sample different responses; run.data_seed moves the prompts."""
    runs = str(tmp_path / "runs")
    common = dict(train={"steps": 2}, logging={"progress": False, "samples_fraction": 1.0},
                  rollout={"n": 4, "max_new_tokens": 8, "temperature": 1.0})
    out = {}
    for name, rollout_seed, data_seed in (("a", None, None), ("b", 1, None), ("c", None, 7)):
        cfg = write_config(tmp_path / name, nano_model_dir, **common,
                           run={"name": name, "output_dir": runs, "seed": 0, "data_seed": data_seed})
        assert main(["train", str(cfg), f"rollout.seed={'null' if rollout_seed is None else rollout_seed}"]) == 0
        out[name] = _samples(tmp_path / "runs" / name)
    a, b, c = out["a"], out["b"], out["c"]
    assert [(s["step"], s["uid"], s["prompt"]) for s in a] == [(s["step"], s["uid"], s["prompt"]) for s in b]
    assert [s["response"] for s in a] != [s["response"] for s in b]
    assert [s["uid"] for s in a] != [s["uid"] for s in c]


def test_ctrl_c_checkpoints_the_step_and_prints_the_resume_command(tmp_path, nano_model_dir):
    """Ctrl-C (SIGTERM takes the same path; see tests/unit/trainer/test_interrupt.py): the step
    in progress finishes and is checkpointed, the exit code is 130 and stderr says how to
    resume; --resume then continues from it."""
    signum = signal.SIGINT
    # a constant lr: the resume below shortens the run, which a cosine schedule's run may not do
    cfg = write_config(tmp_path, nano_model_dir, train={"steps": 10_000, "optim": {"schedule": "constant"}},
                       checkpoint={"every": 0})
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "rlxf.cli.main", "train", str(cfg)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run = tmp_path / "runs" / "t"
    try:
        deadline = time.monotonic() + 240  # a generous bound on start-up, not a timing assertion
        while not ((run / "metrics.jsonl").exists() and (run / "metrics.jsonl").read_text().strip()):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the run wrote no step"
            time.sleep(0.2)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, err
    last = metrics(run)[-1]["step"]
    assert (run / "checkpoints" / f"step_{last}").is_dir()
    assert f"continue from {run / 'checkpoints' / f'step_{last}'}" in err
    assert f"rlxf train {cfg} --resume" in err
    assert main(["train", str(cfg), "--resume", f"train.steps={last + 1}"]) == 0
    assert [m["step"] for m in metrics(run)] == list(range(1, last + 2))


def test_sigterm_during_the_first_evaluation_stops_there_and_resume_starts_over(tmp_path, nano_model_dir,
                                                                                 monkeypatch, capsys):
    """SIGTERM while the run evaluates its start model (eval.at_start) stops it once that
    evaluation is logged: exit 143, no checkpoint, stderr says so; --resume starts over, with
    one step-0 record, not two. Before, the handler was installed only after that evaluation,
    so the signal ended the process with nothing said."""
    import rlxf.trainer.loop as loop

    monkeypatch.setattr(loop, "evaluate", signal_after_first(loop.evaluate))
    cfg = write_config(tmp_path, nano_model_dir, train={"steps": 2}, eval={"every": 0, "at_start": True})
    with caught_outside() as caught:
        assert main(["train", str(cfg)]) == 128 + signal.SIGTERM
    assert not caught
    run = tmp_path / "runs" / "t"
    assert [m["step"] for m in metrics(run)] == [0]
    assert not list((run / "checkpoints").glob("step_*"))
    err = capsys.readouterr().err
    assert "stopped by SIGTERM after step 0" in err and "no checkpoint was written yet" in err
    assert main(["train", str(cfg), "--resume"]) == 0
    assert [m["step"] for m in metrics(run)] == [0, 1, 2]


def test_checkpoints_are_periodic_by_default():
    from rlxf.config.run import CheckpointConfig

    assert CheckpointConfig().every > 0


def _cut_in_half(path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_resume_skips_a_damaged_checkpoint_and_names_damaged_files(tmp_path, nano_model_dir, capsys):
    # a constant lr: the resume below lengthens the run, which a cosine schedule's run may not do
    cfg = write_config(tmp_path, nano_model_dir, train={"steps": 4, "optim": {"schedule": "constant"}},
                       checkpoint={"every": 2, "keep_last": 2})
    run = tmp_path / "runs" / "t"
    assert main(["train", str(cfg)]) == 0
    ckpts = run / "checkpoints"

    # a truncated model file in the newest checkpoint: resume from the previous one, and say so
    _cut_in_half(ckpts / "step_4" / "model" / "model.safetensors")
    assert main(["train", str(cfg), "--resume", "train.steps=5"]) == 0
    log = (run / "train.log").read_text()
    assert f"{ckpts / 'step_4' / 'model' / 'model.safetensors'}: SafetensorError" in log
    assert f"previous intact checkpoint {ckpts / 'step_2'}" in log
    assert [m["step"] for m in metrics(run)] == [1, 2, 3, 4, 5]

    # a broken line in the middle of samples.jsonl: the error names the file and the line
    lines = (run / "samples.jsonl").read_text().splitlines(keepends=True)
    assert len(lines) > 2
    lines[1] = lines[1][: len(lines[1]) // 2] + "\n"
    (run / "samples.jsonl").write_text("".join(lines))
    capsys.readouterr()
    assert main(["train", str(cfg), "--resume", "train.steps=6"]) == 2
    assert f"{run / 'samples.jsonl'}, line 2: not a JSON record" in capsys.readouterr().err

    # every checkpoint damaged: no fallback, the error names each damaged file
    (run / "samples.jsonl").unlink()
    for step in (4, 5):
        _cut_in_half(ckpts / f"step_{step}" / "trainer_state.pt")
    assert main(["train", str(cfg), "--resume", "train.steps=6"]) == 1
    err = capsys.readouterr().err
    assert "no intact checkpoint" in err
    assert all(str(ckpts / f"step_{step}" / "trainer_state.pt") in err for step in (4, 5))


def test_resume_with_another_command_than_the_runs_says_which_made_it(tmp_path, nano_model_dir, capsys):
    """`rlxf train --resume` on an SFT run (and `rlxf sft --resume` on an RL run) exits 2 naming
    the command that made it: from run.json, or, for a run from before run.json, from what its
    checkpoint holds; the failure log does not advise the same command again."""
    cfg = write_config(tmp_path, nano_model_dir, train={"steps": 1}, sft={"steps": 1})
    runs = tmp_path / "runs"
    assert main(["sft", str(cfg), "run.name=s"]) == 0
    assert main(["train", str(cfg), "run.name=t"]) == 0
    capsys.readouterr()
    for command, run, made_by in (("train", "s", "sft"), ("sft", "t", "train")):
        assert main([command, str(cfg), f"run.name={run}", "--resume"]) == 2
        assert f"is a run of `rlxf {made_by}`, not `rlxf {command}`" in capsys.readouterr().err
        (runs / run / "run.json").unlink()  # as a run made before rlxf recorded its command
        assert main([command, str(cfg), f"run.name={run}", "--resume"]) == 2
        err = capsys.readouterr().err
        assert f"{runs / run / 'checkpoints' / 'step_1'} is a checkpoint of" in err and "KeyError" not in err
        assert "continue it with" in err
        assert "the run failed" not in (runs / run / "train.log").read_text()  # no "resume with the same command"
    assert main(["sft", str(cfg), "run.name=s", "--resume", "sft.steps=2"]) == 0  # the right command still resumes
