"""Config.seeds: three separable seeds, each defaulting to run.seed."""

from __future__ import annotations

from rlxf.config import Config


def _cfg(**sections) -> Config:
    return Config.model_validate({"model": {"path": "m"}, "data": {"task": "arithmetic"}, **sections})


def test_every_seed_defaults_to_run_seed():
    s = _cfg(run={"seed": 3}).seeds
    assert (s.data, s.sampling, s.init) == (3, 3, 3)


def test_each_seed_is_set_on_its_own():
    s = _cfg(run={"seed": 3, "data_seed": 5, "init_seed": 9}, rollout={"seed": 1}).seeds
    assert (s.data, s.sampling, s.init) == (5, 1, 9)
    s = _cfg(run={"seed": 3}, rollout={"seed": 0}).seeds   # 0 is a seed, not "unset"
    assert (s.data, s.sampling, s.init) == (3, 0, 3)


def test_a_negative_run_seed_is_refused_at_load_like_the_other_seeds():
    """run.seed was the one seed without ge=0: -5 passed the config, then numpy refused it deep
    inside the engine's sampler, after `rlxf quickstart` had made its output folder and model."""
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match=r"run\.seed|greater than or equal to 0"):
        _cfg(run={"seed": -5})


def test_seeds_past_32_bits_are_refused_as_derived_seeds_read_only_those():
    """run.seed=2**32 gave run.seed=0's mini-batch shuffles (derive_seed folds each part's low 32
    bits) while torch's init differed; past 2**64 it failed in torch after the run had started."""
    import pytest
    from pydantic import ValidationError

    _cfg(run={"seed": 2**32 - 1, "data_seed": 2**32 - 1, "init_seed": 2**32 - 1}, rollout={"seed": 2**32 - 1})
    for sections in ({"run": {"seed": 2**32}}, {"run": {"data_seed": 2**64}}, {"run": {"init_seed": 2**32}},
                     {"rollout": {"seed": 2**32}}):
        with pytest.raises(ValidationError, match="less than or equal to 4294967295"):
            _cfg(**sections)
