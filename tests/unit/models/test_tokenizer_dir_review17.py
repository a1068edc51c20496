"""``model.tokenizer`` may name a directory holding only a tokenizer (no config.json): it was
refused as "holds no model" unless the caller's label happened to be "tokenizer"."""

import pytest

from rlxf.config.model import ModelConfig
from rlxf.models.loading import ModelLoadError, load_tokenizer, tokenizer_from_config


def test_a_tokenizer_only_directory_is_a_model_tokenizer(tmp_path, tokenizer_for_tests):
    tokenizer_for_tests.save_pretrained(tmp_path / "tok")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"model_type": "qwen2"}')
    for what in ("tokenizer", "model.tokenizer"):
        assert len(load_tokenizer(tmp_path / "tok", what=what)) == len(tokenizer_for_tests)
    tok = tokenizer_from_config(ModelConfig(path=str(tmp_path / "m"), tokenizer=str(tmp_path / "tok")))
    assert tok.encode("1+2") == tokenizer_for_tests.encode("1+2")
    # model.path still needs a model: a tokenizer directory there is refused
    with pytest.raises(ModelLoadError, match=r"model\.path: .*tok holds no model"):
        tokenizer_from_config(ModelConfig(path=str(tmp_path / "tok")))
