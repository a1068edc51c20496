"""Field mapping errors and prompt encoding through the chat template."""

from __future__ import annotations

import pytest

from rlxf.data import DataError, encode_prompt, encode_response, render_prompt
from rlxf.data.templates import check_messages, get_field

# A second template, Llama-3 shaped (role header, blank line, content, end-of-turn), on the same tokens.
HEADER_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}<|im_end|>\n\n{{ m['content'] }}<|endoftext|>{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant<|im_end|>\n\n{% endif %}"
)


def test_missing_field_names_it_and_the_keys_there_are():
    with pytest.raises(DataError, match=r"f.jsonl:3: field 'question' \(data.fields.prompt\) is missing; "
                                        r"the record has keys: problem, solution. Set data.fields.prompt"):
        get_field({"problem": "1+1", "solution": "2"}, "question", "f.jsonl:3", "prompt")


def test_messages_are_checked():
    with pytest.raises(DataError, match="must be a non-empty list"):
        check_messages("hi", "w", "messages")
    with pytest.raises(DataError, match=r"messages\[1\] has role 'bot'; valid roles"):
        check_messages([{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}], "w", "messages")
    with pytest.raises(DataError, match=r"messages\[0\] must be an object with 'role' and 'content'"):
        check_messages([{"role": "user"}], "w", "messages")


@pytest.mark.parametrize("template", [None, HEADER_TEMPLATE], ids=["chatml", "header"])
def test_prompt_ids_are_the_templates_own_ids(tokenizer_for_tests, template):
    tok = tokenizer_for_tests
    saved = tok.chat_template
    try:
        if template:
            tok.chat_template = template
        msgs = [{"role": "system", "content": "Answer with a number."}, {"role": "user", "content": "12+34="}]
        ids, text = encode_prompt(tok, msgs)
        want = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=False)
        assert ids == list(want)
        assert tok.decode(ids) == text
        # the same prompt as text + system_prompt gives the same ids
        assert encode_prompt(tok, "12+34=", system_prompt="Answer with a number.") == (ids, text)
    finally:
        tok.chat_template = saved


def test_system_prompt_not_added_twice(tokenizer_for_tests):
    msgs = [{"role": "system", "content": "mine"}, {"role": "user", "content": "q"}]
    text = render_prompt(tokenizer_for_tests, msgs, system_prompt="config")
    assert "mine" in text and "config" not in text


def test_raw_prompt_without_template(tokenizer_for_tests):
    ids, text = encode_prompt(tokenizer_for_tests, "12+34=", system_prompt="Sum:", use_chat_template=False)
    assert text == "Sum:\n\n12+34=" and tokenizer_for_tests.decode(ids) == text
    with pytest.raises(DataError, match="apply_chat_template is false"):
        encode_prompt(tokenizer_for_tests, [{"role": "user", "content": "x"}], use_chat_template=False)


def test_prompt_errors(tokenizer_for_tests):
    tok = tokenizer_for_tests
    with pytest.raises(DataError, match="last message is an assistant turn"):
        encode_prompt(tok, [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}])
    saved = tok.chat_template
    try:
        tok.chat_template = None
        with pytest.raises(DataError, match="has no chat template; set model.chat_template"):
            encode_prompt(tok, "q")
    finally:
        tok.chat_template = saved


def test_response_ends_with_eos(tokenizer_for_tests):
    ids = encode_response(tokenizer_for_tests, "357")
    assert ids[-1] == tokenizer_for_tests.eos_token_id
    assert tokenizer_for_tests.decode(ids[:-1]) == "357" and len(ids) == 4  # digits one per token
