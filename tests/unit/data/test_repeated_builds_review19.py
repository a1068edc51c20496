"""Found by the 19th data review: one quickstart drew the same arithmetic splits 17 times and
encoded the same 20,000 prompts in every stage. Identical builds are now kept, keyed by all they
depend on, and give the same result as a fresh one (and never another build's)."""

from __future__ import annotations

import copy

import pytest

from rlxf.data import templates
from rlxf.data.tasks.arithmetic import ArithmeticTask
from rlxf.data.templates import encode_prompts

HARD = {"min_digits": 3, "max_digits": 3, "ops": "+", "zero_pad": True, "carries": [2, 3]}


def test_the_same_splits_again_are_not_drawn_again_and_are_new_items(monkeypatch):
    drawn = []
    real = ArithmeticTask._draw
    monkeypatch.setattr(ArithmeticTask, "_draw", lambda self, rng: drawn.append(1) or real(self, rng))
    first = ArithmeticTask(HARD).splits(40, 10, seed=1919)
    n = len(drawn)
    again = ArithmeticTask(dict(HARD, carries=(2, 3))).splits(40, 10, seed=1919)   # equal options, another object
    assert len(drawn) == n and again == first
    again[0][0].metadata["operands"].append(1)     # a caller's change stays its own
    assert ArithmeticTask(HARD).splits(40, 10, seed=1919) == first
    # anything that decides the problems draws anew
    for task, sizes in ((ArithmeticTask(HARD), (40, 10, 1920)), (ArithmeticTask(HARD), (41, 10, 1919)),
                        (ArithmeticTask(dict(HARD, carries=[2, 2])), (40, 10, 1919))):
        n = len(drawn)
        assert task.splits(*sizes) != first and len(drawn) > n


def test_the_problems_drawn_are_those_drawn_before():
    """The first problems of a seed, as drawn before the change (checks of a draw reordered)."""
    train, test = ArithmeticTask(HARD).splits(3, 2, seed=0)
    # two carries each: 672+461 carries from the tens and the hundreds; 268+751 likewise
    assert [(t.question, t.answer) for t in test] == [("672+461=", "1133"), ("268+751=", "1019")]
    assert [t.question for t in train] == ["715+639=", "630+974=", "568+355="]
    _, other = ArithmeticTask({"max_digits": 2, "ops": "+-", "allow_negative": False}).splits(1, 2, seed=3)
    assert [(t.question, t.answer) for t in other] == [("6+69=", "75"), ("20+5=", "25")]


PROMPTS = [f"{i:03d}+{i % 7:03d}=" for i in range(1000)]


def test_prompts_encoded_again_with_a_tokenizer_loaded_again_are_not_encoded_again(tokenizer_for_tests,
                                                                                  monkeypatch):
    tok = copy.deepcopy(tokenizer_for_tests)   # another object, encoding alike (as loaded from the same files)
    first = encode_prompts(tokenizer_for_tests, PROMPTS, system_prompt="Add.")
    rendered = []
    real = templates._render_batch
    monkeypatch.setattr(templates, "_render_batch", lambda *a: rendered.append(1) or real(*a))
    again = encode_prompts(tok, PROMPTS, system_prompt="Add.")
    assert not rendered and again == first and again[0][0] is not first[0][0]   # new lists: the caller's own


def _alike(tok):
    return copy.deepcopy(tok)


def _other_template(tok):
    tok = copy.deepcopy(tok)
    tok.chat_template = tok.chat_template.replace("<|im_start|>assistant", "<|im_start|>model")
    return tok


def _added_token(tok):
    tok = copy.deepcopy(tok)
    tok.add_tokens(["+00"])
    return tok


@pytest.mark.parametrize("change", [_other_template, _added_token])
def test_a_tokenizer_that_encodes_otherwise_gets_its_own_encoding(tokenizer_for_tests, change):
    encode_prompts(tokenizer_for_tests, PROMPTS)   # in the cache
    other = change(tokenizer_for_tests)
    want = templates._encode(other, PROMPTS, None, True, None)
    assert want != templates._encode(tokenizer_for_tests, PROMPTS, None, True, None)
    assert encode_prompts(other, PROMPTS) == want


@pytest.mark.parametrize("options", [{"system_prompt": "Add."}, {"use_chat_template": False}])
def test_other_encoding_options_get_their_own_encoding(tokenizer_for_tests, options):
    base = encode_prompts(tokenizer_for_tests, PROMPTS)
    got = encode_prompts(_alike(tokenizer_for_tests), PROMPTS, **options)
    assert got != base
    assert got == templates._encode(tokenizer_for_tests, PROMPTS, options.get("system_prompt"),
                                    options.get("use_chat_template", True), None)
