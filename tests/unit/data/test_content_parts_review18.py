"""Found by the 18th data review: content parts read by one rule (the held-out key, the chat
template and training targets all see the same text)."""

from __future__ import annotations

import copy
import json
import re

import pytest

from rlxf.config.data import DataConfig
from rlxf.data import DataError, build_prompt_data, encode_prompt
from rlxf.data.prompts import content_key

# templates on the built-in tokens: Llama 3's `| trim` (a list would render as its Python repr),
# and one that reads parts as Qwen2-VL's does (text parts back to back)
TRIM_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] | trim }}<|im_end|>\n"
                 "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
PARTS_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.content is string %}{{ m.content }}"
                  "{% else %}{% for p in m.content %}{% if p.type == 'text' %}{{ p.text }}{% endif %}{% endfor %}"
                  "{% endif %}<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def _parts(*texts):
    return [{"role": "user", "content": [{"type": "text", "text": t} for t in texts]}]


@pytest.fixture(params=[None, TRIM_TEMPLATE, PARTS_TEMPLATE], ids=["chatml", "trim", "parts"])
def tok(request, tokenizer_for_tests):
    tok = copy.deepcopy(tokenizer_for_tests)
    if request.param:
        tok.chat_template = request.param
    return tok


def test_parts_render_and_key_as_their_text_back_to_back(tok):
    # the model reads "1234" whichever template; so must the held-out key ("12 34" is another prompt)
    assert encode_prompt(tok, _parts("12", "34")) == encode_prompt(tok, "1234")
    assert encode_prompt(tok, _parts("12", "34"))[1] == "<|im_start|>user\n1234<|im_end|>\n<|im_start|>assistant\n"
    assert content_key(_parts("12", "34")) == content_key("1234")
    assert content_key(_parts("12", "34")) != content_key("12 34")


def test_a_training_prompt_in_parts_that_renders_as_a_held_out_one_is_removed(tmp_path, tokenizer_for_tests):
    train, test = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    train.write_text(json.dumps({"prompt": _parts("What is 12", "+34?")}) + "\n"
                     + json.dumps({"prompt": "What is 5+6?"}) + "\n")
    test.write_text(json.dumps({"prompt": "What is 12+34?"}) + "\n")
    tok = copy.deepcopy(tokenizer_for_tests)
    tok.chat_template = PARTS_TEMPLATE
    data = build_prompt_data(DataConfig(source="jsonl", train_path=str(train), test_path=str(test),
                                        fields={"ground_truth": None}), tok, seed=0)
    assert [p.prompt_text for p in data.train] == ["<|im_start|>user\nWhat is 5+6?<|im_end|>\n<|im_start|>assistant\n"]
    assert data.report["train_removed_in_test"] == 1


@pytest.mark.parametrize("part, problem", [
    ({"type": "image_url", "image_url": {"url": "x.png"}}, "is a 'image_url' part; rlxf reads text only"),
    ({"type": "text", "text": None}, "is a text part whose 'text' is NoneType"),
])
def test_a_prompt_part_without_text_names_line_message_and_part(tmp_path, tokenizer_for_tests, part, problem):
    path = tmp_path / "train.jsonl"
    message = {"role": "user", "content": [{"type": "text", "text": "what is this?"}, part]}
    path.write_text(json.dumps({"prompt": "q"}) + "\n" + json.dumps({"prompt": [message]}) + "\n")
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:2: prompt\[0\].content\[1\] {re.escape(problem)}"):
        build_prompt_data(DataConfig(source="jsonl", train_path=str(path), fields={"ground_truth": None}),
                          tokenizer_for_tests, seed=0)
