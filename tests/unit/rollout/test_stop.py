"""Stop-string matching on the built-in byte-level BPE tokenizer."""

from __future__ import annotations

import pytest
import torch

from rlxf.rollout.stop import StopStrings


def test_candidates_are_tokens_that_can_end_a_stop_string(tokenizer_for_tests):
    tok = tokenizer_for_tests
    m = StopStrings(tok, ["42!"], vocab_size=len(tok))
    ids = tok.encode("x = 42! done")
    text_of = [tok.decode([i]) for i in ids]
    flags = m.candidates(torch.tensor(ids)).tolist()
    for t, f in zip(text_of, flags, strict=True):
        assert f == ("!" in t or t == "" or "\ufffd" in t), t


def test_first_stop_is_the_token_that_completes_the_string(tokenizer_for_tests):
    tok = tokenizer_for_tests
    ids = tok.encode("the answer is 42! and more text after it")
    m = StopStrings(tok, ["42!", "never there"], vocab_size=len(tok))
    end = m.first_stop(ids)
    assert end is not None
    assert "42!" in tok.decode(ids[:end]) and "42!" not in tok.decode(ids[: end - 1])
    assert StopStrings(tok, ["zzz"], vocab_size=len(tok)).first_stop(ids) is None


def test_whitespace_stop_strings_check_every_token(tokenizer_for_tests):
    tok = tokenizer_for_tests
    m = StopStrings(tok, ["\n\n"], vocab_size=len(tok))
    assert bool(m.candidate.all())
    ids = tok.encode("line one\n\nline two")
    end = m.first_stop(ids)
    assert tok.decode(ids[:end]).endswith("\n\n") or "\n\n" in tok.decode(ids[:end])


def test_stop_strings_need_a_tokenizer():
    with pytest.raises(ValueError, match="need a tokenizer"):
        StopStrings(None, ["x"], vocab_size=10)
