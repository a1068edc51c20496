"""The three registries: names, lookups, errors, signature checks."""

from __future__ import annotations

import pytest

from rlxf.algorithms import registry
from rlxf.algorithms.registry import UnknownNameError


def test_builtin_names_match_the_config():
    assert registry.names("advantage") == sorted(
        ["gae", "grpo", "rloo", "reinforce_pp", "reinforce_pp_baseline", "reinforce"])
    assert registry.names("policy_loss") == ["cispo", "dual_clip", "gspo", "ppo_clip", "vanilla"]
    assert registry.names("loss_agg") == [
        "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm", "token_mean"]


def test_unknown_name_lists_valid_ones():
    with pytest.raises(KeyError) as e:
        registry.get("policy_loss", "ppo")
    assert isinstance(e.value, ValueError)
    assert "unknown policy_loss 'ppo'; valid: cispo, dual_clip, gspo, ppo_clip, vanilla" in str(e.value)
    with pytest.raises(UnknownNameError, match="valid kinds: advantage, policy_loss, loss_agg"):
        registry.names("critic")


def _restore(kind, name):
    registry._REGISTRIES[kind].pop(name, None)


def test_register_checks_signature_and_duplicates():
    try:
        @registry.register("advantage", "test_only_estimator")
        def ok(rewards, mask, group_ids, values, params):
            return rewards, rewards

        assert registry.get("advantage", "test_only_estimator") is ok
        assert "test_only_estimator" in registry.names("advantage")
        registry.register("advantage", "test_only_estimator")(ok)  # re-registering the same function is fine

        def other(rewards, mask, group_ids, values, params):
            return rewards, rewards

        with pytest.raises(ValueError, match="already registered"):
            registry.register("advantage", "test_only_estimator")(other)
    finally:
        _restore("advantage", "test_only_estimator")

    def too_few(rewards, mask):
        return rewards, rewards

    with pytest.raises(TypeError, match=r"\(rewards, mask, group_ids, values, params\)"):
        registry.register("advantage", "test_only_bad")(too_few)

    def agg_positional_only(token_loss, mask):  # no num_tokens / num_seqs / norm keywords
        return token_loss.sum()

    with pytest.raises(TypeError, match="num_tokens"):
        registry.register("loss_agg", "test_only_bad")(agg_positional_only)
    assert "test_only_bad" not in registry.names("advantage") + registry.names("loss_agg")


def test_register_rejects_unknown_kind_and_empty_name():
    with pytest.raises(UnknownNameError):
        registry.register("critic", "x")
    with pytest.raises(ValueError, match="non-empty"):
        registry.register("advantage", "")
