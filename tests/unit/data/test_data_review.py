"""Found by review: odd records, eval-only sources, content parts, odd weights, top-level fields
beside a mixture, and template errors that name their prompt."""

from __future__ import annotations

import json

import pytest

from rlxf.config.data import DataConfig
from rlxf.data import DataError, MixtureSampler, build_prompt_data, read_records
from rlxf.data.prompts import content_key
from rlxf.data.sft import build_sft_data
from rlxf.types import Prompt, source_of

FIELDS = {"prompt": "prompt", "ground_truth": "answer", "response": "answer"}


def _write(path, prompts):
    path.write_text("".join(json.dumps({"prompt": p, "answer": "1"}) + "\n" for p in prompts))
    return str(path)


def test_a_key_given_twice_in_a_json_object_is_an_error_naming_file_line_and_key(tmp_path):
    f = tmp_path / "d.jsonl"
    f.write_text('{"prompt": "a", "answer": "1"}\n{"prompt": "x", "answer": "2", "prompt": "y"}\n')
    with pytest.raises(DataError, match=rf"{f}:2: key 'prompt' appears twice"):
        list(read_records(f, "jsonl"))
    g = tmp_path / "d.json"
    g.write_text('[{"prompt": "a", "meta": {"k": 1, "k": 2}}]')   # nested objects too
    with pytest.raises(DataError, match=rf"{g}: key 'k' appears twice"):
        list(read_records(g, "json"))


def test_jsonl_files_concatenated_with_their_byte_order_marks_read_whole(tmp_path):
    f = tmp_path / "all.jsonl"
    f.write_bytes(b'\xef\xbb\xbf{"prompt": "a"}\r\n\xef\xbb\xbf{"prompt": "b"}\r\n\r\n')
    assert [r["prompt"] for _, r in read_records(f, "jsonl")] == ["a", "b"]


def test_csv_rows_short_of_cells_and_repeated_header_columns_are_errors(tmp_path):
    f = tmp_path / "short.csv"
    f.write_text("prompt,answer\n1+1=,2\n\n2+2=\n")   # the blank line is skipped, the short row is not
    with pytest.raises(DataError, match=rf"{f}:4: 1 cells but the header has 2 columns"):
        list(read_records(f, "csv"))
    g = tmp_path / "twice.csv"
    g.write_text("prompt,answer,prompt\na,1,b\n")
    with pytest.raises(DataError, match=r"twice.csv:1: the header names column\(s\) \['prompt'\] more than once"):
        list(read_records(g, "csv"))
    h = tmp_path / "ok.csv"
    h.write_text('prompt,answer\r\n"1,1=",\r\n')   # CRLF, a quoted comma, an empty last cell
    assert [r for _, r in read_records(h, "csv")] == [{"prompt": "1,1=", "answer": ""}]


@pytest.mark.parametrize("build", [build_prompt_data, build_sft_data])
def test_a_source_of_weight_0_may_use_its_held_out_file_as_training_file(tmp_path, tokenizer_for_tests, build):
    """Evaluated only: its training prompts are all held out, which is fine; without held-out
    prompts it would do nothing, which is an error."""
    a = _write(tmp_path / "a.jsonl", [f"a question {i}" for i in range(4)])
    b = _write(tmp_path / "b.jsonl", ["b question 1", "a question 0"])
    watched = {"source": "jsonl", "train_path": b, "test_path": b, "weight": 0, "fields": FIELDS}
    cfg = DataConfig(sources=[{"source": "jsonl", "train_path": a, "fields": FIELDS}, watched])
    data = build(cfg, tokenizer_for_tests, seed=0)
    assert {source_of(e.uid) for e in data.train} == {"a"} and len(data.train) == 3   # "a question 0" held out
    assert {source_of(e.uid) for e in data.test} == {"b"} and len(data.test) == 2
    cfg = DataConfig(sources=[{"source": "jsonl", "train_path": a, "fields": FIELDS}, {**watched, "test_path": None}])
    with pytest.raises(DataError, match=r"data.sources\[b\] has weight 0 \(evaluated only\) but no held-out prompts"):
        build(cfg, tokenizer_for_tests, seed=0)


def test_top_level_source_fields_beside_a_mixture_are_said_to_be_ignored(tmp_path, tokenizer_for_tests, caplog):
    a = _write(tmp_path / "a.jsonl", ["q"])
    cfg = DataConfig(sources=[{"source": "jsonl", "train_path": a}], fields={"prompt": "question"}, test_size=3)
    with caplog.at_level("WARNING", logger="rlxf.data"):
        build_prompt_data(cfg, tokenizer_for_tests, seed=0)
    assert "data.test_size, data.fields set beside data.sources: ignored" in caplog.text


def test_content_parts_have_the_key_of_their_text(tmp_path, tokenizer_for_tests):
    parts = [{"role": "system", "content": "Be brief."},
             {"role": "user", "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": "2+2?"}]}]
    assert content_key(parts) == content_key("What is 2+2?")
    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    train.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": q}]}) + "\n"
                             for q in ("What is 2+2?", "What is 3+3?")))
    test.write_text(json.dumps({"prompt": parts[1:]}) + "\n")
    cfg = DataConfig(source="jsonl", train_path=str(train), test_path=str(test),
                     fields={"prompt": None, "messages": "prompt", "ground_truth": None})
    tokenizer_for_tests.chat_template, template = (
        "{% for m in messages %}{{ m.role }}: {% if m.content is string %}{{ m.content }}{% else %}"
        "{% for p in m.content %}{{ p.text }} {% endfor %}{% endif %}\n{% endfor %}assistant:",
        tokenizer_for_tests.chat_template)
    try:
        data = build_prompt_data(cfg, tokenizer_for_tests, seed=0)
    finally:
        tokenizer_for_tests.chat_template = template
    assert [p.metadata for p in data.train] == [{}] and data.report["train_removed_in_test"] == 1
    assert "3+3" in data.train[0].prompt_text


@pytest.mark.parametrize("weight", [float("inf"), float("nan"), -1.0])
def test_mixture_weights_must_be_finite_and_not_negative(weight):
    prompts = [Prompt(uid=f"{s}:train:{i}", prompt_ids=[i], prompt_text=s) for s in "ab" for i in range(2)]
    with pytest.raises(DataError, match=r"mixture weights \{'a': .*\} \(data.sources\[\].weight\): each must be"):
        MixtureSampler(prompts, {"a": weight, "b": 1.0}, seed=0)
    with pytest.raises(DataError, match="their sum finite"):   # each finite, but not their sum
        MixtureSampler(prompts, {"a": 1e308, "b": 1e308}, seed=0)


def test_a_template_that_rejects_the_system_prompt_names_the_task_item_and_the_setting(tokenizer_for_tests):
    template = tokenizer_for_tests.chat_template
    tokenizer_for_tests.chat_template = (
        "{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}"
        "{% endif %}{{ m.content }}\n{% endfor %}")
    try:
        with pytest.raises(DataError, match=r"task arithmetic train item 0: cannot render the prompt: .*System role "
                                             r"not supported; data.system_prompt is set"):
            build_prompt_data(DataConfig(task="arithmetic", train_size=3, test_size=1, system_prompt="Be brief."),
                              tokenizer_for_tests, seed=0)
    finally:
        tokenizer_for_tests.chat_template = template
