"""Plugins written as docs/algorithms.md and the README say, and the mistakes a researcher makes
writing them: each mistake is an error naming the plugin, its line and what to return."""

from __future__ import annotations

import sys
import textwrap

import pytest

from rlxf.cli.main import main
from rlxf.config import ConfigError, load_config

BASE = """\
run: {name: t}
model: {path: no_model_needed_to_check_a_config}
data: {task: arithmetic}
rollout: {n: 4}
"""


def _config(tmp_path, module: str, source: str, extra: str) -> str:
    (tmp_path / f"{module}.py").write_text(textwrap.dedent(source))
    path = tmp_path / "config.yaml"
    path.write_text(BASE + f"plugins: [{module}]\n" + extra)
    return str(path)


@pytest.fixture(autouse=True)
def _forget_modules():
    """Plugin modules written by a test are imported afresh by the next one."""
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("pad_"):
            del sys.modules[name]


def test_the_documented_plugins_load_and_are_selected(tmp_path):
    path = _config(tmp_path, "pad_doc", '''
        from rlxf.algorithms import (importance_ratio, masked_mean, masked_whiten, register,
                                     sequence_scores, zero_masked)


        @register("advantage", "pad_my_estimator")
        def my_estimator(rewards, mask, group_ids, values, params):
            score = sequence_scores(rewards, mask)[:, None].expand_as(rewards)  # (B, T)
            return masked_whiten(score, mask, eps=params.eps), score * mask


        @register("off_policy", "pad_drop_overconfident")
        def drop_overconfident(old_logprobs, rollout_logprobs, mask, params):
            ratio = importance_ratio(old_logprobs, rollout_logprobs, mask, params.level)
            weight = zero_masked((ratio >= params.floor).to(ratio.dtype), mask)
            return weight, {"masked_frac": masked_mean(1 - weight, mask)}
        ''', "algorithm: {advantage: pad_my_estimator, off_policy: pad_drop_overconfident, is_floor: 0.5}\n")
    cfg = load_config(path)
    assert (cfg.algorithm.advantage, cfg.algorithm.off_policy) == ("pad_my_estimator", "pad_drop_overconfident")


def test_a_plugin_that_raises_while_imported_is_a_config_error_naming_its_line(tmp_path, capsys):
    path = _config(tmp_path, "pad_name_error", """\
        from rlxf.algorithms import register
        x = 1
        undefined_helper()
        """, "")
    assert main(["explain", path]) == 2
    err = capsys.readouterr().err
    assert "plugins.0" in err and f"{tmp_path / 'pad_name_error.py'}:3" in err and "NameError" in err


def test_a_plugin_taking_a_builtin_name_is_a_config_error_naming_both(tmp_path):
    path = _config(tmp_path, "pad_collide", """\
        from rlxf.algorithms import register

        @register("advantage", "grpo")
        def mine(rewards, mask, group_ids, values, params):
            return rewards, rewards
        """, "")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    msg = str(e.value)
    assert "plugins.0" in msg and "already registered by rlxf.algorithms.advantages" in msg
    assert f"pad_collide.mine at {tmp_path / 'pad_collide.py'}:3" in msg


def _train_a_step(tmp_path, nano_model_dir, path: str) -> int:
    cfg = tmp_path / "run.yaml"
    cfg.write_text(open(path).read().replace("no_model_needed_to_check_a_config", str(nano_model_dir)).replace(
        "run: {name: t}", f"run: {{name: t, output_dir: {tmp_path / 'runs'}}}") +
        "train: {steps: 1, prompts_per_step: 2, micro_batch_size: 8}\nlogging: {progress: false}\n")
    return main(["train", str(cfg)])


def test_an_advantage_of_shape_b_is_refused_at_its_first_call_naming_the_function(tmp_path, nano_model_dir,
                                                                                    capsys):
    """(B,) advantages broadcast against (B, T) (or fail far from the plugin): its first call's
    result is checked, and the error names the function and the shape it must return."""
    path = _config(tmp_path, "pad_per_sequence", """\
        from rlxf.algorithms import register, sequence_scores

        @register("advantage", "pad_per_sequence")
        def per_sequence(rewards, mask, group_ids, values, params):
            s = sequence_scores(rewards, mask)
            return s - s.mean(), s
        """, "algorithm: {advantage: pad_per_sequence}\n")
    load_config(path)    # the plugin is not called on made-up data while the config loads
    assert _train_a_step(tmp_path, nano_model_dir, path) == 1
    msg = capsys.readouterr().err
    assert "advantage 'pad_per_sequence'" in msg and "pad_per_sequence.per_sequence" in msg
    assert "of shape (8,), not (8, " in msg and "(B, T)" in msg


def test_a_policy_loss_returning_an_aggregated_scalar_is_refused_at_its_first_call():
    """A loss already reduced to a number trained silently (the aggregation broadcast it)."""
    import torch

    from rlxf.algorithms import register, registry
    from rlxf.algorithms.registry import ContractError

    @register("policy_loss", "pad_scalar")
    def scalar(logprobs, old_logprobs, advantages, mask, params, rollout_logprobs=None):
        ratio = torch.exp(logprobs - old_logprobs)
        return (-advantages * ratio * mask).sum() / mask.sum(), {}

    loss = registry.checked("policy_loss", "pad_scalar")
    logprobs = torch.zeros(4, 3, requires_grad=True)
    with pytest.raises(ContractError) as e:
        loss(logprobs, logprobs.detach(), torch.ones(4, 3), torch.ones(4, 3), None)
    assert "token_loss of shape (), not (4, 3)" in str(e.value) and "one loss per token" in str(e.value)
    assert registry.checked("policy_loss", "ppo_clip") is registry.get("policy_loss", "ppo_clip")  # rlxf's own


def test_config_named_batched_and_trl_reward_functions_are_called_in_their_style(tmp_path, monkeypatch):
    """The config.yaml of an rlxf.train run names its batched / TRL-style functions as `custom`
    verifiers: they were called with one RewardInput (an error in training, 0 in rlxf eval)."""
    from rlxf.rewards.custom import CustomVerifier
    from rlxf.rewards.types import RewardInput

    (tmp_path / "pad_styles.py").write_text(textwrap.dedent("""\
        def shorter(samples, scale=100):
            return [-len(s.response) / scale for s in samples]

        def ends(prompts, completions, answer, **columns):
            return [float(c.endswith(a)) for c, a in zip(completions, answer)]
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    xs = [RewardInput(prompt="1+1=", response="12", ground_truth="2"),
          RewardInput(prompt="1+2=", response="4", ground_truth="3")]
    shorter = CustomVerifier("shorter", "pad_styles:shorter", {"scale": 10})
    assert [shorter.score(x).score for x in xs] == [-0.2, -0.1]
    ends = CustomVerifier("ends", "pad_styles:ends")
    assert [ends.score(x).score for x in xs] == [1.0, 0.0]


def test_an_episode_error_names_the_environment_line_that_raised(tmp_path, monkeypatch):
    """A broken environment's episodes said `NameError: ...` and nothing of where."""
    from rlxf.envs.agent import call_all
    from rlxf.envs.base import build_env

    (tmp_path / "pad_env.py").write_text(textwrap.dedent("""\
        from rlxf.envs import StepResult

        class Buggy:
            def reset(self, task):
                return [{"role": "user", "content": "Say numbers."}]

            def step(self, action):
                return StepResult([], reward=1.0, terminated=True, info={"n": undefined_name})
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    env = build_env("pad_env:Buggy")
    [(ok, why)] = call_all([lambda: env.step("12")], timeout=5.0)
    assert not ok and "NameError" in why and f"{tmp_path / 'pad_env.py'}:8 in step" in why


def test_a_plugin_whose_name_starts_like_rlxf_is_still_the_users_line(tmp_path, monkeypatch):
    """rlxf's own frames are left out of the line an import error names; a plugin package
    installed next to it whose name merely starts with "rlxf" is not rlxf's."""
    import rlxf.config.load as load
    import rlxf.errors

    monkeypatch.setattr(rlxf.errors, "_RLXF_DIR", str(tmp_path / "rlxf"))
    (tmp_path / "rlxf_pad_plugin").mkdir()
    (tmp_path / "rlxf_pad_plugin" / "__init__.py").write_text("x = 1\nundefined_name\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    failure = load.import_user_module("rlxf_pad_plugin", "plugin 'rlxf_pad_plugin'", "here")
    assert f"{tmp_path / 'rlxf_pad_plugin' / '__init__.py'}:2" in failure
    sys.modules.pop("rlxf_pad_plugin", None)
