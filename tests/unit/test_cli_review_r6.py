"""Command-line mistakes an outside review found: runs of one name overlaid as one, `report .`
without a name, a run given twice, a checkpoint's trained model replaced by `init-model
--overwrite`, `eval` on prompts formatted otherwise than the run trained, and `generate` on a
file of chat messages."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml

from rlxf.cli.main import main


def _run(path: Path, records: list[dict]) -> Path:
    path.mkdir(parents=True)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_report_tells_runs_of_one_name_apart(tmp_path, capsys):
    """A sweep's runs share run.name (runs/seed0/grpo, runs/seed1/grpo): they were drawn and
    tabled as two runs named `grpo`, and compared in compare-grpo-vs-grpo.html."""
    a = _run(tmp_path / "seed0" / "grpo", [{"step": 1, "reward/mean": 0.1}])
    b = _run(tmp_path / "seed1" / "grpo", [{"step": 1, "reward/mean": 0.9}])
    assert main(["report", str(a), str(b)]) == 0
    out = tmp_path / "seed0" / "compare-seed0_grpo-vs-seed1_grpo.html"
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    page = out.read_text()
    assert "<td>seed0/grpo</td>" in page and "<td>seed1/grpo</td>" in page


def test_report_of_dot_is_named_for_its_directory(tmp_path, monkeypatch):
    run = _run(tmp_path / "my-run", [{"step": 1, "reward/mean": 0.5}])
    monkeypatch.chdir(run)
    assert main(["report", "."]) == 0
    page = (run / "report.html").read_text()
    assert "<title>rlxf report: my-run</title>" in page and "<td>my-run</td>" in page   # was ""


def test_report_refuses_one_run_given_twice(tmp_path, capsys, monkeypatch):
    run = _run(tmp_path / "r", [{"step": 1, "reward/mean": 0.5}])
    monkeypatch.chdir(tmp_path)
    assert main(["report", "r", str(run)]) == 2
    assert f"{run} is given twice (r is the same directory); give each run directory once" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [run]   # no compare-r-vs-r.html


def test_report_says_a_run_has_no_metrics_yet(tmp_path, capsys):
    run = _run(tmp_path / "r", [])
    (run / "metrics.jsonl").write_text('{"step": 1, "reward/me')   # the first step's line, torn
    assert main(["report", str(run)]) == 0
    assert f"{run}/metrics.jsonl holds no metrics yet (no step finished)" in capsys.readouterr().err


def test_init_model_does_not_overwrite_a_checkpoint_model(tmp_path, capsys):
    """The run directory was protected, the trained model inside it was not: --overwrite put
    random weights in place of runs/x/checkpoints/step_1/model."""
    run = tmp_path / "runs" / "x"
    model = run / "checkpoints" / "step_1" / "model"
    model.mkdir(parents=True)
    (run / "run.json").write_text('{"command": "train"}')
    (model / "config.json").write_text('{"trained": true}')
    assert main(["init-model", str(model), "--preset", "nano", "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert f"is inside the rlxf run directory {run}" in err and "give a directory outside it" in err
    assert (model / "config.json").read_text() == '{"trained": true}'
    assert sorted(p.name for p in model.iterdir()) == ["config.json"]


def test_eval_says_when_the_config_formats_prompts_otherwise_than_the_run(tmp_path, nano_model_dir, capsys):
    """An SFT run on raw prompts (apply_chat_template: false) evaluated with a config that keeps
    the default chat template scores on prompts it never saw, and the number went to its
    eval.jsonl without a word."""
    run = tmp_path / "sft-run"
    shutil.copytree(nano_model_dir, run / "checkpoints" / "step_2" / "model")
    (run / "run.json").write_text('{"command": "sft"}')
    data = {"task": "arithmetic", "train_size": 8, "test_size": 4, "max_prompt_len": 32}
    (run / "config.yaml").write_text(yaml.safe_dump({"data": {**data, "apply_chat_template": False}}))
    config = tmp_path / "rl.yaml"
    config.write_text(yaml.safe_dump({
        "model": {"path": str(nano_model_dir)}, "data": data, "rollout": {"max_new_tokens": 2},
        "reward": {"verifiers": [{"type": "numeric", "name": "correct"}]}, "eval": {"num_problems": 2}}))
    assert main(["eval", str(config), "--checkpoint", str(run)]) == 0
    err = capsys.readouterr().err
    assert (f"note: {config} formats prompts otherwise than the model's run trained on them (data.apply_chat_template "
            f"is True here, False in {run / 'config.yaml'}); to measure the model on the prompts it learned from, "
            f"add data.apply_chat_template=false\n") in err
    assert main(["eval", str(config), "--checkpoint", str(run), "data.apply_chat_template=false"]) == 0
    assert "note:" not in capsys.readouterr().err   # the same format: nothing to say
    assert len((run / "eval.jsonl").read_text().splitlines()) == 2


def _prompts(tmp_path: Path, text: bytes) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_bytes(text)
    return path


def test_generate_reads_a_file_of_chats_and_texts(tmp_path, nano_model_dir, capsys):
    chat = {"messages": [{"role": "system", "content": "Add."}, {"role": "user", "content": "1+2="}]}
    path = _prompts(tmp_path, (json.dumps(chat) + "\n\n" + json.dumps({"prompt": "3+4="}) + "\n").encode())
    assert main(["generate", str(nano_model_dir), "5+5=", "--prompts-file", str(path), "--max-new-tokens", "2"]) == 0
    out = capsys.readouterr().out
    assert "=== prompt 0: 5+5=\n" in out
    assert "=== prompt 1: [2 messages] user: 1+2=\n" in out and "=== prompt 2: 3+4=\n" in out
    assert out.count("--- sample 0 (") == 3


def test_generate_prompts_file_errors_name_the_line(tmp_path, nano_model_dir, capsys):
    model = str(nano_model_dir)
    cases = [
        (b'{"prompt": "a"}\n{"messages": [{"role": "usr", "content": "x"}]}\n', ":2: messages[0] has role 'usr'"),
        (b'{"prompt": "a"}\n{"prompt": "caf\xe9"}\n', ":2: not UTF-8 text (byte 0xe9); save the file as UTF-8"),
        (b'{"prompt": "a"}\n[1]\n', ':2: a line must be an object with one of "prompt" (text) or "messages"'),
        (b'{"prompt": ["a"]}\n', ':1: "prompt" must be text, got list'),
        (b"\n\n", "holds no prompts"),
    ]
    for text, message in cases:
        assert main(["generate", model, "--prompts-file", str(_prompts(tmp_path, text))]) == 2, message
        assert message in capsys.readouterr().err
    chat = _prompts(tmp_path, b'{"messages": [{"role": "user", "content": "1+2="}]}\n')
    assert main(["generate", model, "--prompts-file", str(chat), "--no-chat-template"]) == 2
    assert ':1: a chat ("messages") needs the chat template' in capsys.readouterr().err
    assert main(["generate", model]) == 2
    assert "no prompts: give prompt texts after the model, or --prompts-file" in capsys.readouterr().err
