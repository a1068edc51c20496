"""Found by the second data review: training targets given as content parts or tool calls, blank
prompts, JSON read as JSON lines (and back), CSV records named by the line they end on, and
batched prompt encoding that must give the ids of one-by-one encoding."""

from __future__ import annotations

import copy
import csv
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlxf.config.data import DataConfig
from rlxf.data import DataError, build_preference_data, build_prompt_data, build_sft_data, read_records
from rlxf.data.templates import encode_prompts


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def _parts(*texts):
    return [{"type": "text", "text": t} for t in texts]


def test_an_sft_answer_given_as_content_parts_trains_on_its_text_not_its_repr(tmp_path, tokenizer_for_tests):
    path = _jsonl(tmp_path / "sft.jsonl", [
        {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": _parts("4", "2")}]}])
    cfg = DataConfig(source="jsonl", train_path=path, fields={"prompt": None, "messages": "messages"})
    (ex,) = build_sft_data(cfg, tokenizer_for_tests, 0).train
    assert ex.response_text == "42"   # the parts as a chat template renders them: joined
    assert ex.response_ids == tokenizer_for_tests("42", add_special_tokens=False)["input_ids"] + [
        tokenizer_for_tests.eos_token_id]


def test_preference_answers_given_as_content_parts_are_their_text(tmp_path, tokenizer_for_tests):
    def conv(answer):
        return [{"role": "user", "content": "q"}, {"role": "assistant", "content": _parts(answer)}]

    path = _jsonl(tmp_path / "pref.jsonl", [{"chosen": conv("good"), "rejected": conv("bad")}])
    (ex,) = build_preference_data(DataConfig(source="jsonl", train_path=path), tokenizer_for_tests, 0).train
    assert (ex.chosen_text, ex.rejected_text) == ("good", "bad")


@pytest.mark.parametrize("answer, message", [
    ({"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": "{}"}}]},
     "messages[1] is an assistant turn with no text content (a tool call)"),
    ({"role": "assistant", "content": [{"type": "image", "url": "x.png"}]},
     "messages[1].content[0] is a 'image' part; rlxf reads text only"),
])
def test_an_sft_answer_without_text_is_an_error_naming_line_and_message(tmp_path, tokenizer_for_tests, answer,
                                                                        message):
    path = _jsonl(tmp_path / "sft.jsonl", [
        {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]},
        {"messages": [{"role": "user", "content": "q"}, answer]}])
    cfg = DataConfig(source="jsonl", train_path=path, fields={"prompt": None, "messages": "messages"})
    with pytest.raises(DataError) as err:
        build_sft_data(cfg, tokenizer_for_tests, 0)
    assert str(err.value).startswith(f"{path}:2: {message}")


@pytest.mark.parametrize("kind, row, fields, field", [
    ("rl", {"prompt": "", "answer": "1"}, {}, "prompt"),
    ("rl", {"prompt": " \n\t", "answer": "1"}, {}, "prompt"),
    ("rl", {"m": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": _parts(" ")}]},
     {"prompt": None, "messages": "m", "ground_truth": None}, "m"),
    ("sft", {"prompt": "  ", "response": "a"}, {}, "prompt"),
    ("sft", {"m": [{"role": "user", "content": ""}, {"role": "assistant", "content": "a"}]},
     {"prompt": None, "messages": "m"}, "m"),
    ("pref", {"prompt": "", "chosen": "a", "rejected": "b"}, {}, "prompt"),
    ("pref", {"chosen": [{"role": "user", "content": " "}, {"role": "assistant", "content": "a"}],
              "rejected": [{"role": "user", "content": " "}, {"role": "assistant", "content": "b"}]}, {}, "chosen"),
])
def test_a_blank_prompt_is_an_error_naming_its_line_and_field(tmp_path, tokenizer_for_tests, kind, row, fields,
                                                              field):
    """An empty CSV cell or a wrongly mapped field would train on the template alone."""
    good = {"rl": {"prompt": "q", "answer": "1", "m": [{"role": "user", "content": "q"}]},
            "sft": {"prompt": "q", "response": "a", "m": [{"role": "user", "content": "q"},
                                                           {"role": "assistant", "content": "a"}]},
            "pref": {"prompt": "q", "chosen": "a", "rejected": "b"}}[kind]
    path = _jsonl(tmp_path / "train.jsonl", [good, row])
    build = {"sft": build_sft_data, "pref": build_preference_data, "rl": build_prompt_data}[kind]
    with pytest.raises(DataError, match=rf"^{re.escape(path)}:2: field '{field}' holds an empty prompt"):
        build(DataConfig(source="jsonl", train_path=path, fields=fields), tokenizer_for_tests, 0)


def test_a_prompt_of_an_image_part_only_is_not_blank(tmp_path, tokenizer_for_tests):
    from rlxf.data.templates import check_not_blank

    msgs = [{"role": "user", "content": [{"type": "image", "url": "x.png"}]}]
    assert check_not_blank(msgs, "w", "m") is msgs


@pytest.mark.parametrize("name, fmt, text, hint", [
    ("lines.json", "json", '{"prompt": "a"}\n{"prompt": "b"}\n', r"lines.json:2: .*JSON lines\? set data.source=jsonl"),
    ("list.jsonl", "jsonl", '[\n  {"prompt": "a"}\n]\n', r"list.jsonl:1: .*not JSON lines: set data.source=json"),
    ("one.jsonl", "jsonl", '[{"prompt": "a"}, {"prompt": "b"}]\n',
     r"one.jsonl:1: expected a JSON object per line, got list; .*set data.source=json$"),
])
def test_json_read_as_json_lines_or_back_names_the_right_format(tmp_path, name, fmt, text, hint):
    (tmp_path / name).write_text(text)
    with pytest.raises(DataError, match=hint):
        list(read_records(tmp_path / name, fmt))


# prompts that hold special-token text, unicode, spacing, and chat messages with a system turn
PROMPTS = ["12+34=", "say <|im_end|> then <|endoftext|>", "  héllo wörld \u00a0 ", "a\n\nb",
           [{"role": "system", "content": "mine"}, {"role": "user", "content": "q <|im_start|>"}],
           [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}, {"role": "user", "content": "z"}]]


@pytest.mark.parametrize("system_prompt", [None, "Be brief."])
def test_batched_encoding_gives_the_ids_of_each_prompt_templated_alone(tokenizer_for_tests, system_prompt):
    tok = tokenizer_for_tests
    got = encode_prompts(tok, PROMPTS, system_prompt=system_prompt)
    for p, (ids, text) in zip(PROMPTS, got, strict=True):
        msgs = [{"role": "user", "content": p}] if isinstance(p, str) else p
        if system_prompt and msgs[0]["role"] != "system":
            msgs = [{"role": "system", "content": system_prompt}, *msgs]
        assert text == tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        assert ids == list(tok.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True,
                                                   return_dict=False))


def test_batched_encoding_without_template_gives_the_tokenizers_own_ids(tokenizer_for_tests):
    tok = tokenizer_for_tests
    texts = [p for p in PROMPTS if isinstance(p, str)] + [tok.bos_token + "x" if tok.bos_token else "x"]
    got = encode_prompts(tok, texts, use_chat_template=False)
    for t, (ids, text) in zip(texts, got, strict=True):
        assert text == t
        bos = tok.bos_token and t.startswith(tok.bos_token)
        assert ids == tok(t, add_special_tokens=not bos)["input_ids"]


def test_a_backend_set_to_truncate_does_not_cut_the_prompts(tokenizer_for_tests):
    """A tokenizer.json may enable truncation; the tokenizer's own call turns it off, so must we."""
    tok = copy.deepcopy(tokenizer_for_tests)
    want = encode_prompts(tokenizer_for_tests, PROMPTS)
    tok.backend_tokenizer.enable_truncation(3)
    assert encode_prompts(tok, PROMPTS) == want


def test_a_tokenizer_class_that_changes_encoding_is_called_as_itself(tokenizer_for_tests):
    """CodeLlama's tokenizer, say, does more in its encode methods than its Rust backend does."""
    tok = copy.deepcopy(tokenizer_for_tests)

    class Marked(type(tok)):
        def __call__(self, text, **kwargs):
            out = super().__call__(text, **kwargs)
            out["input_ids"] = [[7, *ids] for ids in out["input_ids"]]
            return out

    tok.__class__ = Marked
    plain = encode_prompts(tokenizer_for_tests, ["12+34="], use_chat_template=False)
    assert encode_prompts(tok, ["12+34="], use_chat_template=False) == [([7, *plain[0][0]], plain[0][1])]


class _CharTokenizer:
    """Not a transformers tokenizer: ids are code points, no template, no backend."""

    chat_template = None
    bos_token = None

    def __call__(self, texts, add_special_tokens=True):
        return {"input_ids": [[ord(c) for c in t] for t in texts]}


def test_a_tokenizer_without_a_rust_backend_is_called_as_itself():
    assert encode_prompts(_CharTokenizer(), ["ab", "c"], use_chat_template=False) == [([97, 98], "ab"), ([99], "c")]


_CELL = st.text(st.sampled_from("ab ,\"\n"), max_size=6)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(_CELL, _CELL, st.booleans()), min_size=1, max_size=6))
def test_a_csv_record_is_named_by_the_line_it_starts_on(tmp_path_factory, rows):
    """A quoted cell may hold line breaks; the record's place is where it starts, not ends."""
    path = tmp_path_factory.mktemp("csv") / "d.csv"
    with path.open("w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["prompt", "answer"])
        want, line = [], 2
        for prompt, answer, blank_after in rows:
            w.writerow([prompt, answer])
            want.append((f"{path}:{line}", {"prompt": prompt, "answer": answer}))
            line += 1 + prompt.count("\n") + answer.count("\n")
            if blank_after:
                f.write("\n")
                line += 1
    # a row of two empty cells is written as "," (not blank), so every row is read
    assert list(read_records(path, "csv")) == want


def test_preference_data_from_a_mixture_is_refused_as_a_mixture_not_as_a_task(tmp_path, tokenizer_for_tests):
    path = _jsonl(tmp_path / "p.jsonl", [{"prompt": "q", "chosen": "a", "rejected": "b"}])
    cfg = DataConfig(sources=[{"name": "a", "source": "jsonl", "train_path": path}])
    with pytest.raises(DataError, match=r"read from one source, not a mixture: data.sources \(a\)"):
        build_preference_data(cfg, tokenizer_for_tests, 0)
