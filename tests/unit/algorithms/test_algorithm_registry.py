"""The three registries: names, lookups, errors, signature checks."""

from __future__ import annotations

import pytest
import torch

from rlxf.algorithms import AdvantageParams, OffPolicyParams, PolicyLossParams, registry
from rlxf.algorithms.registry import UnknownNameError


def test_builtin_names_match_the_config():
    assert registry.names("advantage") == sorted(
        ["gae", "grpo", "maxrl", "rloo", "reinforce_pp", "reinforce_pp_baseline", "reinforce"])
    assert registry.names("policy_loss") == ["cispo", "dual_clip", "gspo", "ppo_clip", "vanilla"]
    assert registry.names("loss_agg") == [
        "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm", "token_mean"]
    assert registry.names("off_policy") == ["decoupled", "mis", "none", "tis"]


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


def test_every_registered_function_takes_bool_or_float_masks_in_either_precision():
    g = torch.Generator().manual_seed(0)
    bool_mask = torch.tensor([[True, True, False], [True, False, True], [False, False, False]])
    for dtype in (torch.float32, torch.float64):
        x = torch.randn(3, 3, generator=g).to(dtype)
        old = x - 0.1
        for mask in (bool_mask, bool_mask.to(dtype)):
            for name in registry.names("advantage"):
                rewards = x.abs() if name == "maxrl" else x   # maxrl refuses negative returns
                adv, ret = registry.get("advantage", name)(rewards, mask, torch.tensor([0, 0, 1]), x, AdvantageParams())
                assert adv.dtype == dtype and ret.dtype == dtype and torch.isfinite(adv).all(), name
            for name in registry.names("policy_loss"):
                loss, m = registry.get("policy_loss", name)(x, old, x, mask, PolicyLossParams(),
                                                            rollout_logprobs=old)
                assert loss.dtype == dtype and torch.isfinite(loss).all(), name
            for name in registry.names("off_policy"):
                w, m = registry.get("off_policy", name)(old, x, mask, OffPolicyParams(cap=1.5))
                assert w.dtype == dtype and torch.isfinite(w).all(), name
                assert all(torch.isfinite(v) for v in m.values()), name
            for name in registry.names("loss_agg"):
                out = registry.get("loss_agg", name)(x, mask, norm=3)
                assert out.dtype == dtype and out.dim() == 0, name
        # bool and float masks give the same numbers
        for name in registry.names("loss_agg"):
            agg = registry.get("loss_agg", name)
            assert agg(x, bool_mask, norm=3).item() == agg(x, bool_mask.to(dtype), norm=3).item()
