"""Preference pairs whose two conversations differ before the answer only in spacing."""

from __future__ import annotations

import json
import re

import pytest

from rlxf.config.data import DataConfig
from rlxf.data import DataError, build_preference_data


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _turns(*turns):
    return [{"role": role, "content": text} for role, text in turns]


def test_conversations_that_differ_only_in_spacing_before_the_answer_are_one_prompt(tmp_path, tokenizer_for_tests):
    # one exporter kept the user turn's trailing newline: refused before as "different prompts"
    row = {"chosen": _turns(("user", "What is  2+2?\n"), ("assistant", "4")),
           "rejected": _turns(("user", "What is 2+2?"), ("assistant", "5"))}
    cfg = DataConfig(source="jsonl", train_path=_jsonl(tmp_path / "p.jsonl", [row]), fields={"prompt": "question"})
    (ex,) = build_preference_data(cfg, tokenizer_for_tests, 0).train
    assert (ex.prompt_text, ex.chosen_text, ex.rejected_text) == (
        "<|im_start|>user\nWhat is  2+2?\n<|im_end|>\n<|im_start|>assistant\n", "4", "5")


@pytest.mark.parametrize("rejected, turn", [
    (_turns(("user", "What is 2+3?"), ("assistant", "5")), 0),
    (_turns(("system", "Be brief."), ("user", "What is 2+2?"), ("assistant", "5")), 0),
    (_turns(("user", "What is 2+2?"), ("assistant", "4"), ("user", "Sure?"), ("assistant", "5")), 1),
])
def test_conversations_that_differ_before_the_answer_name_the_first_turn(tmp_path, tokenizer_for_tests, rejected,
                                                                        turn):
    row = {"chosen": _turns(("user", "What is 2+2?"), ("assistant", "4")), "rejected": rejected}
    path = _jsonl(tmp_path / "p.jsonl", [row])
    with pytest.raises(DataError, match=rf"^{re.escape(path)}:1: 'chosen' and 'rejected' have different conversations "
                                        rf"before the answer, so they answer different prompts \(from turn {turn}: "):
        build_preference_data(DataConfig(source="jsonl", train_path=path, fields={"prompt": "question"}),
                              tokenizer_for_tests, 0)


def test_a_pair_longer_than_the_context_window_is_an_error_naming_its_record(tmp_path, tokenizer_for_tests):
    rows = [{"prompt": "q", "chosen": "a", "rejected": "b"}, {"prompt": "q " * 6, "chosen": "a " * 20, "rejected": "b"}]
    path = _jsonl(tmp_path / "p.jsonl", rows)
    cfg = DataConfig(source="jsonl", train_path=path, fields={"ground_truth": None})
    prompt_len = len(build_preference_data(cfg, tokenizer_for_tests, 0).train[1].prompt_ids)
    longest = prompt_len + len(tokenizer_for_tests.encode("a " * 20, add_special_tokens=False)) + 1   # + eos
    # before, the pair reached the model: a GPT-2 (learned positions) failed with "index out of range in self"
    with pytest.raises(DataError, match=rf"^{re.escape(path)}:2: the pair is {longest} tokens \(prompt {prompt_len} "
                                        rf"\+ longer response {longest - prompt_len}\), more than the model's context "
                                        rf"window of {longest - 1}; set data.max_prompt_len and data.max_response_len"):
        build_preference_data(cfg, tokenizer_for_tests, 0, context_window=longest - 1)
    assert len(build_preference_data(cfg, tokenizer_for_tests, 0, context_window=longest).train) == 2


@pytest.mark.parametrize("command", ["dpo", "rm"])
def test_dpo_refuses_pairs_longer_than_its_model_before_training(command, tmp_path, nano_model_dir, capsys):
    """DPO and the reward model alike (the reward model's pairs keep their responses' ends)."""
    import yaml

    from rlxf.cli.main import main

    path = _jsonl(tmp_path / "p.jsonl", [{"prompt": "q", "chosen": "a", "rejected": "b"},
                                         {"prompt": "q", "chosen": "apple " * 2100, "rejected": "b"}])
    cfg = {"run": {"name": command, "output_dir": str(tmp_path / "runs")}, "model": {"path": str(nano_model_dir)},
           "data": {"source": "jsonl", "train_path": path, "fields": {"ground_truth": None}},
           command: {"steps": 1, "batch_size": 2, "micro_batch_size": 2}, "logging": {"progress": False}}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    assert main([command, str(tmp_path / "cfg.yaml")]) == 2
    assert re.search(rf"{re.escape(path)}:2: the pair is \d+ tokens .* context window of 2048",
                     capsys.readouterr().err)
