"""build_prompt_data / build_sft_data / build_preference_data end to end, and token-in/token-out."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from rlxf.config.data import DataConfig, FieldMap
from rlxf.data import DataError, build_preference_data, build_prompt_data, build_sft_data, encode_prompt
from rlxf.data.tasks.arithmetic import evaluate

# A Llama-3 shaped template on the built-in tokens: role header, blank line, content, end of turn.
HEADER_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}<|im_end|>\n\n{{ m['content'] }}<|endoftext|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant<|im_end|>\n\n{% endif %}"
)


@pytest.fixture(params=["chatml", "header"])
def tok(request, tokenizer_for_tests):
    """The built-in tokenizer under two chat templates (each with its own end-of-turn eos)."""
    import copy

    t = copy.deepcopy(tokenizer_for_tests)
    if request.param == "header":
        t.chat_template = HEADER_TEMPLATE
        t.eos_token = "<|endoftext|>"
    return t


def jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_task_prompts(tok):
    cfg = DataConfig(source="task", task="arithmetic", train_size=300, test_size=40, system_prompt="Sum.")
    data = build_prompt_data(cfg, tok, seed=0)
    assert len(data.train) == 300 and len(data.test) == 40
    assert data.report["train"] == 300 and data.report["max_prompt_tokens"] == max(
        len(p.prompt_ids) for p in data.train + data.test)
    p = data.train[0]
    assert p.uid == "arithmetic:train:0"
    assert p.metadata["task"] == "arithmetic" and p.metadata["task_options"]["max_digits"] == 3
    assert p.ground_truth == p.metadata["answer"] == str(evaluate(p.metadata["operands"], p.metadata["ops"]))
    assert "Sum." in p.prompt_text and p.prompt_text.endswith(tok.apply_chat_template(
        [{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True).split("x")[-1])
    test_ids = {tuple(t.prompt_ids) for t in data.test}
    assert not any(tuple(t.prompt_ids) in test_ids for t in data.train)


def test_reasoning_gym_prompts_carry_the_entry(tokenizer_for_tests):
    cfg = DataConfig(source="task", task="reasoning_gym:leg_counting", train_size=20, test_size=5,
                     max_prompt_len=400, task_options={"min_animals": 1, "max_animals": 2})
    data = build_prompt_data(cfg, tokenizer_for_tests, seed=1)
    p = data.test[0]
    assert p.metadata["task"] == "reasoning_gym:leg_counting" and p.metadata["task_options"] == {"min_animals": 1, "max_animals": 2}
    assert set(p.ground_truth) == {"question", "answer", "metadata"}
    assert p.ground_truth["question"] in p.prompt_text


@pytest.mark.parametrize("fmt", ["jsonl", "json", "csv", "parquet", "hf"])
def test_file_sources_with_field_mapping(tmp_path, tokenizer_for_tests, fmt):
    rows = [{"q": f"{i}+1=", "sol": str(i + 1), "level": str(i % 3)} for i in range(6)]
    path = tmp_path / f"train.{fmt}"
    if fmt == "jsonl":
        jsonl(path, rows)
    elif fmt == "json":
        path.write_text(json.dumps(rows))
    elif fmt == "csv":
        path.write_text("q,sol,level\n" + "".join(f"{r['q']},{r['sol']},{r['level']}\n" for r in rows))
    elif fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        import datasets

        datasets.DatasetDict({"train": datasets.Dataset.from_list(rows[:4]),
                              "test": datasets.Dataset.from_list(rows[4:])}).save_to_disk(str(path))
    cfg = DataConfig(source=fmt, train_path=str(path), fields=FieldMap(prompt="q", ground_truth="sol"))
    data = build_prompt_data(cfg, tokenizer_for_tests, seed=0)
    n_train = 4 if fmt == "hf" else 6
    assert len(data.train) == n_train and len(data.test) == (2 if fmt == "hf" else 0)
    p = data.train[1]
    assert p.ground_truth == "2" and p.metadata == {"level": "1"}
    assert p.prompt_ids == encode_prompt(tokenizer_for_tests, "1+1=")[0]
    assert p.uid == "train:train:1"


def test_messages_field_and_explicit_metadata(tmp_path, tokenizer_for_tests):
    rows = [{"conv": [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}], "gt": "x",
             "tests": [1, 2], "junk": 0}]
    cfg = DataConfig(source="jsonl", train_path=jsonl(tmp_path / "m.jsonl", rows),
                     fields=FieldMap(messages="conv", ground_truth="gt", metadata=["tests"]))
    (p,) = build_prompt_data(cfg, tokenizer_for_tests, seed=0).train
    assert p.metadata == {"tests": [1, 2]}
    assert p.prompt_ids == encode_prompt(tokenizer_for_tests, rows[0]["conv"])[0]


def test_repeated_prompts_are_kept_and_counted(tmp_path, tokenizer_for_tests, caplog):
    """A prompt written twice is drawn (or scored) twice: kept, counted in the report, and a
    held-out repeat, which weighs twice in every accuracy, is warned about."""
    train = jsonl(tmp_path / "train.jsonl", [{"prompt": q, "answer": "x"} for q in ("a?", "b?", "a?", " a? ", "c?")])
    test = jsonl(tmp_path / "test.jsonl", [{"prompt": q, "answer": "x"} for q in ("d?", "d?", "e?")])
    with caplog.at_level(logging.INFO, logger="rlxf.data"):
        data = build_prompt_data(DataConfig(source="jsonl", train_path=train, test_path=test), tokenizer_for_tests, 0)
    assert len(data.train) == 5 and len(data.test) == 3
    assert data.report["train_repeated"] == 2 and data.report["test_repeated"] == 1  # " a? " is "a?" folded
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("test_repeated=1" in m and "counted again in the accuracy" in m for m in warned)
    assert not any("train_repeated" in m for m in warned)
    distinct = jsonl(tmp_path / "distinct.jsonl", [{"prompt": q, "answer": "x"} for q in ("f?", "g?")])
    data = build_prompt_data(DataConfig(source="jsonl", train_path=train, test_path=distinct), tokenizer_for_tests, 0)
    assert "test_repeated" not in data.report


def test_missing_mapped_field_names_field_file_and_line(tmp_path, tokenizer_for_tests):
    path = jsonl(tmp_path / "t.jsonl", [{"prompt": "a", "answer": "1"}, {"question": "b", "answer": "2"}])
    cfg = DataConfig(source="jsonl", train_path=path)
    with pytest.raises(DataError, match=rf"{path}:2: field 'prompt' \(data.fields.prompt\) is missing; "
                                        r"the record has keys: question, answer"):
        build_prompt_data(cfg, tokenizer_for_tests, seed=0)


def test_length_policies_are_counted(tmp_path, tokenizer_for_tests, caplog):
    rows = [{"prompt": "1+1=", "answer": "2"}, {"prompt": "9" * 60, "answer": "9"}, {"prompt": "2+2=", "answer": "4"}]
    path = jsonl(tmp_path / "t.jsonl", rows)
    short = len(encode_prompt(tokenizer_for_tests, "1+1=")[0])
    with caplog.at_level(logging.INFO, logger="rlxf.data"):
        dropped = build_prompt_data(DataConfig(source="jsonl", train_path=path, max_prompt_len=short), tokenizer_for_tests, 0)
    assert [p.ground_truth for p in dropped.train] == ["2", "4"]
    assert dropped.report["train_prompt_dropped_overlong"] == 1 and dropped.report["train_read"] == 3
    assert "train_prompt_dropped_overlong=1" in caplog.text

    cut = build_prompt_data(DataConfig(source="jsonl", train_path=path, max_prompt_len=short,
                                       overlong_prompt="truncate"), tokenizer_for_tests, 0)
    long_ids = encode_prompt(tokenizer_for_tests, "9" * 60)[0]
    assert cut.report["train_prompt_truncated"] == 1 and len(cut.train) == 3
    assert cut.train[1].prompt_ids == long_ids[-short:]  # the end (generation prompt) is kept
    assert cut.train[1].prompt_text == tokenizer_for_tests.decode(long_ids[-short:])

    with pytest.raises(DataError, match=rf"{path}:2: train_prompt has {len(long_ids)} tokens, over the limit of {short}"):
        build_prompt_data(DataConfig(source="jsonl", train_path=path, max_prompt_len=short, overlong_prompt="error"),
                          tokenizer_for_tests, 0)


def test_empty_after_filtering_is_a_clear_error(tmp_path, tokenizer_for_tests):
    path = jsonl(tmp_path / "t.jsonl", [{"prompt": "1+1=", "answer": "2"}])
    with pytest.raises(DataError, match=r"no train examples left after filtering \(train_prompt_dropped_overlong=1, "
                                        r"train_read=1\).*max_prompt_len \(now 3\)"):
        build_prompt_data(DataConfig(source="jsonl", train_path=path, max_prompt_len=3), tokenizer_for_tests, 0)
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(DataError, match="train_read=0"):
        build_prompt_data(DataConfig(source="jsonl", train_path=str(tmp_path / "empty.jsonl")), tokenizer_for_tests, 0)


def test_test_prompts_are_removed_from_training(tmp_path, tokenizer_for_tests):
    train = jsonl(tmp_path / "train.jsonl", [{"prompt": f"{i}+0=", "answer": str(i)} for i in range(5)])
    test = jsonl(tmp_path / "test.jsonl", [{"prompt": "3+0=", "answer": "3"}, {"prompt": "9+0=", "answer": "9"}])
    data = build_prompt_data(DataConfig(source="jsonl", train_path=train, test_path=test), tokenizer_for_tests, 0)
    assert [p.ground_truth for p in data.train] == ["0", "1", "2", "4"]
    assert data.report["train_removed_in_test"] == 1 and len(data.test) == 2


# --- SFT and preference ----------------------------------------------------------------------

def test_sft_token_in_token_out_across_templates(tmp_path, tok):
    """prompt_ids + response_ids is the template's conversation up to the end-of-turn token."""
    rows = [{"prompt": "12+34=", "response": "46"},
            {"messages": [{"role": "user", "content": "7*8="}, {"role": "assistant", "content": "56"}]}]
    by_prompt = jsonl(tmp_path / "a.jsonl", rows[:1])
    by_messages = jsonl(tmp_path / "b.jsonl", rows[1:])
    (a,) = build_sft_data(DataConfig(source="jsonl", train_path=by_prompt), tok, 0).train
    (b,) = build_sft_data(DataConfig(source="jsonl", train_path=by_messages, fields=FieldMap(messages="messages")),
                          tok, 0).train
    for ex, user, answer in ((a, "12+34=", "46"), (b, "7*8=", "56")):
        conv = [{"role": "user", "content": user}, {"role": "assistant", "content": answer}]
        full = tok.apply_chat_template(conv, tokenize=False)
        assert ex.response_ids[-1] == tok.eos_token_id
        seq = tok.decode(ex.prompt_ids + ex.response_ids)
        assert full.startswith(seq) and seq.endswith(tok.eos_token)
        assert ex.prompt_ids == encode_prompt(tok, user)[0] and ex.response_text == answer


def test_sft_from_task_and_length_limits(tokenizer_for_tests):
    cfg = DataConfig(source="task", task="arithmetic", train_size=50, test_size=10, max_response_len=3,
                     task_options={"max_digits": 2, "ops": "*"})
    data = build_sft_data(cfg, tokenizer_for_tests, seed=0)
    # answers of up to 4 digits + eos: those over 3 tokens (>= 3 digits) are dropped and counted
    assert all(len(e.response_ids) <= 3 for e in data.train)
    assert data.report["train_response_dropped_overlong"] == 50 - len(data.train) > 0
    assert tokenizer_for_tests.decode(data.train[0].response_ids[:-1]) == data.train[0].response_text


def test_sft_mixture_by_source_with_held_out_removed_across_sources(tokenizer_for_tests):
    """data.sources works for SFT as for RL: uids name their source (the mixture sampler reads
    them), and no source trains on a prompt any source holds out, whatever the seeds do."""
    from rlxf.data import build_sampler

    sums = {"max_digits": 1, "ops": "+"}   # 100 distinct problems: two seeds' splits overlap
    cfg = DataConfig(sources=[{"name": "a", "task": "arithmetic", "task_options": sums, "train_size": 60,
                               "test_size": 10, "weight": 3},
                              {"name": "b", "task": "arithmetic", "task_options": sums, "train_size": 60,
                               "test_size": 10, "weight": 1, "seed": 7}])
    data = build_sft_data(cfg, tokenizer_for_tests, seed=0)
    assert data.weights == {"a": 3.0, "b": 1.0}
    assert {e.uid.split(":")[0] for e in data.train} == {"a", "b"}
    held_out = {e.prompt_text for e in data.test}
    assert not held_out & {e.prompt_text for e in data.train}
    removed = sum(data.report.get(f"{n}/train_removed_held_out", 0) for n in "ab")
    assert removed == 120 - len(data.train) > 0
    batch = build_sampler(data.train, data.weights, seed=0).next_batch(16)
    assert [e.uid.split(":")[0] for e in batch].count("b") == 4


def test_preference_pairs_text_and_conversation(tmp_path, tokenizer_for_tests):
    conv = lambda a: [{"role": "user", "content": "2+2="}, {"role": "assistant", "content": a}]  # noqa: E731
    path = jsonl(tmp_path / "p.jsonl", [{"prompt": "1+1=", "chosen": "2", "rejected": "3"},
                                        {"chosen": conv("4"), "rejected": conv("5")}])
    data = build_preference_data(DataConfig(source="jsonl", train_path=path), tokenizer_for_tests, 0)
    a, b = data.train
    eos = tokenizer_for_tests.eos_token_id
    assert a.chosen_ids[-1] == a.rejected_ids[-1] == eos and a.chosen_text == "2" and a.rejected_text == "3"
    assert b.prompt_ids == encode_prompt(tokenizer_for_tests, "2+2=")[0] and b.chosen_text == "4"
    bad = jsonl(tmp_path / "bad.jsonl", [{"chosen": conv("4"), "rejected": [{"role": "user", "content": "x"},
                                                                            {"role": "assistant", "content": "5"}]}])
    with pytest.raises(DataError, match="different conversations before the answer"):
        build_preference_data(DataConfig(source="jsonl", train_path=bad), tokenizer_for_tests, 0)
    missing = jsonl(tmp_path / "missing.jsonl", [{"prompt": "1+1=", "good": "2", "rejected": "3"}])
    with pytest.raises(DataError, match=r"field 'chosen' \(data.fields.chosen\) is missing; the record has keys: "
                                        r"prompt, good, rejected"):
        build_preference_data(DataConfig(source="jsonl", train_path=missing), tokenizer_for_tests, 0)
    with pytest.raises(DataError, match="not from a procedural task"):
        build_preference_data(DataConfig(source="task", task="arithmetic"), tokenizer_for_tests, 0)


# --- token-in / token-out with a model --------------------------------------------------------

def test_generated_ids_score_the_same_in_the_trainer(nano_model_dir, tok):
    """The engine generates from Prompt.prompt_ids; the trainer scores those same ids plus the
    generated ids (never re-tokenized text): the log-probs agree with the generator's own."""
    from transformers import AutoModelForCausalLM

    from rlxf.models import sequence_logprobs

    model = AutoModelForCausalLM.from_pretrained(nano_model_dir)
    data = build_prompt_data(DataConfig(source="task", task="arithmetic", train_size=3, test_size=1), tok, seed=0)
    prompts = [p.prompt_ids for p in data.train]
    responses, gen_logprobs = [], []
    torch.manual_seed(0)
    for ids in prompts:
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             do_sample=True, max_new_tokens=6, min_new_tokens=6, output_logits=True,
                             return_dict_in_generate=True, pad_token_id=tok.pad_token_id, top_k=0, top_p=1.0)
        new = out.sequences[0, len(ids):].tolist()
        responses.append(new)
        gen_logprobs.append(torch.stack([torch.log_softmax(lg[0].float(), -1)[t] for lg, t in zip(out.logits, new, strict=True)]))
    with torch.no_grad():
        got = sequence_logprobs(model, prompts, responses).logprobs
    for i, want in enumerate(gen_logprobs):
        torch.testing.assert_close(got[i, :len(want)], want, rtol=1e-4, atol=1e-4)
