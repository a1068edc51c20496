"""The quickstart pipeline end to end, shrunk to a few steps (its learning result is measured by
running `rlxf quickstart` itself; see README)."""

from __future__ import annotations

import json

from rlxf.cli.main import main


def test_quickstart_pipeline_runs(tmp_path, capsys):
    out = tmp_path / "qs"
    assert main(["quickstart", str(out), "--preset", "nano", "--sft-steps", "3", "--rl-steps", "2"]) == 0
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
