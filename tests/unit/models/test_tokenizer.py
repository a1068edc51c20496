"""The built-in tokenizer: exact size, digits one per token, ChatML template, determinism."""

from __future__ import annotations

from rlxf.models.tokenizer import CHATML_TEMPLATE, IM_END, IM_START, PAD, train_tokenizer


def test_size_and_special_tokens(tokenizer_for_tests):
    tok = tokenizer_for_tests
    assert len(tok) == 4096
    assert tok.eos_token == IM_END and tok.pad_token == PAD and tok.eos_token_id != tok.pad_token_id
    assert tok.convert_tokens_to_ids(IM_START) not in (tok.eos_token_id, tok.pad_token_id)


def test_digits_are_single_tokens(tokenizer_for_tests):
    tok = tokenizer_for_tests
    ids = tok.encode("12+3405=3417", add_special_tokens=False)
    assert [tok.decode([i]) for i in ids] == list("12+3405=3417")


def test_round_trip_text(tokenizer_for_tests):
    text = "def get_user_name(x):\n    return x  # Alice asked: what is 7 * 8?"
    assert tok_decode(tokenizer_for_tests, text) == text


def tok_decode(tok, text):
    return tok.decode(tok.encode(text, add_special_tokens=False))


def test_chat_template_is_chatml(tokenizer_for_tests):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3?"}]
    text = tokenizer_for_tests.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+3?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tokenizer_for_tests.chat_template == CHATML_TEMPLATE


def test_training_is_deterministic(tokenizer_for_tests):
    again = train_tokenizer()
    assert again.backend_tokenizer.to_str() == tokenizer_for_tests.backend_tokenizer.to_str()
