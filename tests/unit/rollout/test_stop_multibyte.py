"""Stop strings whose UTF-8 bytes far outnumber their characters (one byte-level token each)."""

from __future__ import annotations

from rlxf.rollout.stop import StopStrings


def test_multibyte_stop_string_is_found(tokenizer_for_tests):
    tok = tokenizer_for_tests
    stop = "日本語テキスト"  # 7 characters, 21 UTF-8 bytes
    ids = tok.encode("answer " + stop + " more")
    stop_tokens = len(tok.encode(stop))
    assert stop_tokens > len(stop) + 8  # the case the old character-sized window missed
    m = StopStrings(tok, [stop], vocab_size=len(tok))
    assert m.window >= stop_tokens
    end = m.first_stop(ids)
    assert end is not None
    assert stop in tok.decode(ids[:end]) and stop not in tok.decode(ids[: end - 1])
