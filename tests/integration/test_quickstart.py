"""The quickstart pipeline end to end, shrunk to a few steps (its learning result is measured by
running `rlxf quickstart` itself; see README)."""

from __future__ import annotations

import json

from rlxf.cli.main import main


def test_an_interrupted_quickstart_continues_with_resume_and_finishes(tmp_path, capsys, monkeypatch):
    """Interrupted in GRPO (a first Ctrl-C: the step is checkpointed), the quickstart exits 130
    and prints the command that continues it; that command keeps the finished base model and
    SFT run, continues GRPO, and runs the rest: the finished pipeline is what an uninterrupted one
    leaves (its table, summary, per-source evals, report)."""
    import signal

    import rlxf.placement
    from rlxf.trainer.interrupt import TrainingInterrupted

    out = tmp_path / "qs"
    args = ["quickstart", str(out), "--preset", "nano", "--sft-steps", "3", "--rl-steps", "2"]
    real = rlxf.placement.run_training

    def interrupted(*a, **k):
        raise TrainingInterrupted(signal.SIGINT, 0, None)

    monkeypatch.setattr(rlxf.placement, "run_training", interrupted)
    assert main(args) == 130
    assert f"rlxf quickstart {out} --seed 0 --preset nano --resume" in capsys.readouterr().err
    assert set(json.loads((out / "stages.json").read_text())) == {"base", "sft"}
    sft_metrics = (out / "sft" / "metrics.jsonl").read_text()
    monkeypatch.setattr(rlxf.placement, "run_training", real)
    assert main([*args, "--resume"]) == 0
    assert set(json.loads((out / "stages.json").read_text())) == {"base", "sft", "grpo", "sft-more"}
    assert (out / "sft" / "metrics.jsonl").read_text() == sft_metrics   # not run again
    steps = [json.loads(line)["step"] for line in (out / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2]   # its evaluation before training, then its two steps

    # what the finished pipeline leaves (one pipeline for both checks: each costs half a minute)
    printed = capsys.readouterr().out
    assert "hard (2-3 carries)" in printed and "continued SFT for the same time" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert [r["model"] for r in summary["results"]] == [
        "SFT, hard ones rare", "+ GRPO + PPO-ptx on easy", "+ continued SFT, same time"]
    assert summary["held_out_problems"] == 500 and summary["remedy"] is True
    grpo = [json.loads(line) for line in (out / "grpo" / "metrics.jsonl").read_text().splitlines()]
    assert {"eval/hard/accuracy", "eval/easy/accuracy", "eval/source_mean_accuracy"} <= set(grpo[-1])
    for stage in ("sft", "grpo", "sft-more"):
        assert (out / stage / "metrics.jsonl").exists() and (out / stage / "config.yaml").exists()
    assert (out / "grpo" / "report.html").exists()
    assert list((out / "sft-more" / "checkpoints").glob("step_*/model/model.safetensors"))
    assert main(["quickstart", str(out), "--preset", "nano"]) == 2   # exists: needs --overwrite
    assert main(["quickstart", str(tmp_path / "none"), "--resume"]) == 2
