"""The typed reward config: kinds, defaults, the custom shorthand, cross-field checks."""

import pytest
from pydantic import ValidationError

from rlxf.config.reward import (
    VERIFIER_TYPES,
    CodeVerifierConfig,
    CustomVerifierConfig,
    MathVerifierConfig,
    RewardConfig,
)
from rlxf.rewards.base import FACTORIES


def test_defaults_to_one_math_verifier():
    cfg = RewardConfig()
    assert [type(v) for v in cfg.verifiers] == [MathVerifierConfig]
    assert (cfg.names, cfg.accuracy_name, cfg.workers, cfg.error_score, cfg.url) == (["math"], "math", 0, 0.0, None)


def test_each_kind_parses_to_its_own_class_and_has_a_factory():
    cfg = RewardConfig.model_validate({"verifiers": [
        {"type": "code", "cpu_s": 1}, {"type": "format", "pattern": "x", "name": "fmt", "weight": 0.2},
        {"type": "my.module:fn", "options": {"k": 1}}]})
    assert isinstance(cfg.verifiers[0], CodeVerifierConfig) and cfg.verifiers[0].cpu_s == 1
    assert isinstance(cfg.verifiers[2], CustomVerifierConfig)
    assert cfg.verifiers[2].function == "my.module:fn" and cfg.verifiers[2].options == {"k": 1}
    assert cfg.names == ["code", "fmt", "fn"]
    assert set(FACTORIES) == set(VERIFIER_TYPES)


@pytest.mark.parametrize("verifiers, extra, message", [
    ([{"type": "math"}, {"type": "math"}], {}, "repeat"),
    ([{"type": "math"}], {"accuracy": "nope"}, "allowed"),
    ([{"type": "format"}], {}, "pattern` or `required_tags"),
    ([{"type": "judge", "model": "m"}], {}, "needs `url`"),
    ([{"type": "judge", "model": "m", "url": "http://x", "score_min": 5, "score_max": 5}], {}, "must exceed"),
    ([{"type": "custom", "function": "no_colon"}], {}, "package.module:function"),
    ([{"type": "mathh"}], {}, "does not match any of the expected tags"),
    ([{"type": "math", "bogus": 1}], {}, "Extra inputs"),
    ([], {}, "at least 1"),
])
def test_invalid_configs_say_what_is_wrong(verifiers, extra, message):
    with pytest.raises(ValidationError, match=message):
        RewardConfig.model_validate({"verifiers": verifiers, **extra})


def test_named_duplicates_are_fine_and_accuracy_can_point_anywhere():
    cfg = RewardConfig.model_validate({"verifiers": [{"type": "math"}, {"type": "math", "name": "math2"}],
                                       "accuracy": "math2"})
    assert cfg.accuracy_name == "math2"


def test_whole_config_loads_reward_section(tmp_path):
    from rlxf.config import ConfigError, load_config

    path = tmp_path / "c.yaml"
    path.write_text("model: {path: m}\ndata: {task: arithmetic}\nreward:\n  verifiers:\n    - {type: math, bogus: 1}\n")
    with pytest.raises(ConfigError, match="unknown field.*Valid fields here: answer_tag, extract"):
        load_config(path)
    cfg = load_config(path, ["reward.verifiers=[{type: numeric, rel_tol: 0.01}]"])
    assert cfg.reward.verifiers[0].rel_tol == 0.01
