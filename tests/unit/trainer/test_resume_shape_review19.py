"""A resume whose model.path now holds another architecture (found by the checkpoint review):
the learner's load failed with torch's hundreds of "size mismatch" lines; it now names the fields."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import Qwen2Config

from rlxf.errors import UserInputError
from rlxf.trainer.learner import check_same_shape


def _config(**kw):
    return Qwen2Config(vocab_size=300, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, intermediate_size=192, **kw)


def test_a_checkpoint_of_another_shape_is_refused_naming_the_fields():
    with pytest.raises(UserInputError, match=r"hidden_size: now 64, checkpoint 32.*model\.path must hold"):
        check_same_shape(_config(), Qwen2Config(vocab_size=300, hidden_size=32, num_hidden_layers=2,
                                                num_attention_heads=4, num_key_value_heads=2, intermediate_size=192),
                         Path("runs/r/checkpoints/step_2/model"))


def test_the_same_shape_passes_whatever_else_differs():
    check_same_shape(_config(), _config(rope_theta=5.0), Path("m"))


def test_a_resume_without_the_runs_config_says_it_cannot_compare(tmp_path, caplog):
    """check_resume_compatible returned silently when config.yaml was gone: any change went unnoticed."""
    import logging

    from rlxf.cli.train import check_resume_compatible
    from rlxf.config import Config

    cfg = Config.model_validate({"model": {"path": "m"}, "data": {"task": "arithmetic"}})
    with caplog.at_level(logging.WARNING, logger="rlxf"):
        check_resume_compatible(tmp_path / "config.yaml", cfg)
    assert "config.yaml is missing, so this config cannot be compared" in caplog.text
