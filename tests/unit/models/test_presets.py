"""Preset sizes: the documented parameter counts are what the built models have."""

from __future__ import annotations

import pytest

from rlxf.models import PRESETS, build_model, count_parameters, get_preset

# Hand-computed from the table in rlxf/models/presets.py (vocab 4096, tied embeddings).
EXPECTED = {"nano": 361_024, "tiny": 3_412_224, "small": 28_066_304, "base": 99_911_424}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_param_count_formula_matches_table(name):
    assert PRESETS[name].param_count(4096) == EXPECTED[name]


@pytest.mark.parametrize("name", ["nano", "tiny"])
def test_built_model_has_the_documented_size(name, tokenizer_for_tests):
    model = build_model(name, tokenizer_for_tests, seed=0)
    assert count_parameters(model) == EXPECTED[name]
    cfg = model.config
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert cfg.tie_word_embeddings and cfg.vocab_size == len(tokenizer_for_tests) == 4096
    assert cfg.eos_token_id == tokenizer_for_tests.eos_token_id


def test_same_seed_same_weights_other_seed_differs(tokenizer_for_tests):
    a = build_model("nano", tokenizer_for_tests, seed=3).state_dict()
    b = build_model("nano", tokenizer_for_tests, seed=3).state_dict()
    c = build_model("nano", tokenizer_for_tests, seed=4).state_dict()
    assert all((a[k] == b[k]).all() for k in a)
    assert any((a[k] != c[k]).any() for k in a)


def test_unknown_preset_lists_valid_ones():
    with pytest.raises(ValueError, match="valid presets: nano, tiny, small, base"):
        get_preset("huge")
