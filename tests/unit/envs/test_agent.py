"""The agent loop with a scripted engine: exact masks and provenance, limits, credit assignment,
failure isolation (raising, hanging, garbage-returning environments), and the trip to Experience."""

from __future__ import annotations

import re
import threading

import pytest
import torch

from rlxf.config.algorithm import AlgorithmConfig
from rlxf.config.env import EnvConfig
from rlxf.envs.agent import EpisodeLimits, run_episodes
from rlxf.envs.base import StepResult, build_env
from rlxf.envs.rollout import EnvRollout
from rlxf.envs.tokens import encode_text, render
from rlxf.rollout import SamplingParams
from rlxf.trainer.experience import ExperienceMaker
from rlxf.types import Completion, Prompt

VERSION = 7


class ScriptedEngine:
    """Answers each request with ``policy(conversation text, request seed)`` as canonical ids + eos."""

    def __init__(self, tokenizer, policy):
        self.tokenizer, self.policy, self.policy_version = tokenizer, policy, VERSION

    def generate(self, requests, sampling):
        out = []
        for r in requests:
            text = self.tokenizer.decode(list(r.prompt_ids))
            ids = encode_text(self.tokenizer, self.policy(text, r.seed))[: sampling.max_new_tokens - 1]
            ids.append(self.tokenizer.eos_token_id)
            out.append([Completion(ids, [-0.25] * len(ids), "stop", VERSION)])
        return out


def bisect_policy(text, seed, low=1, high=16):
    """Binary search, reading its earlier guesses and the hints from the conversation."""
    guesses = [int(g) for g in re.findall(r"I guess (\d+)", text)]
    hints = re.findall(r"user\n(higher|lower)", text)
    for guess, hint in zip(guesses, hints):
        low, high = (guess + 1, high) if hint == "higher" else (low, guess - 1)
    return f"I guess {(low + high) // 2}"


def prompts(secrets):
    return [Prompt(uid=f"g:{i}", prompt_ids=[1], prompt_text="", ground_truth=str(s)) for i, s in enumerate(secrets)]


def guess_env(**options):
    return lambda: build_env("guess_number", options)


def test_episode_ids_masks_and_provenance(tokenizer_for_tests):
    tok = tokenizer_for_tests
    engine = ScriptedEngine(tok, bisect_policy)
    trajs = run_episodes(engine, tok, guess_env(), prompts([11, 8]), [5, 6], SamplingParams(n=2, max_new_tokens=16),
                         EpisodeLimits(max_turns=6))
    assert [t.group for t in trajs] == [0, 0, 1, 1]
    for t in trajs:
        ep = t.episode
        assert ep["end"] == "terminated" and t.reward == 1.0 and t.finish_reason == "stop"
        assert ep["turn_rewards"][-1] == 1.0 and ep["infos"][-1]["success"]
        msgs = ep["messages"]
        model_ids = [encode_text(tok, m["content"]) + [tok.eos_token_id] for m in msgs if m["role"] == "assistant"]
        # the whole sequence is a fresh templating of the conversation up to the last model turn, plus that turn
        fresh = encode_text(tok, render(tok, msgs[:-1], generation_prompt=True)) + model_ids[-1]
        assert t.prompt.prompt_ids + t.response_ids == fresh
        # mask 1 exactly on the model's tokens, with the engine's log-probs and version; 0 elsewhere
        expected_mask, pos, ids = [], 0, t.response_ids
        for turn in model_ids:
            while ids[pos:pos + len(turn)] != turn:
                expected_mask.append(0)
                pos += 1
            expected_mask += [1] * len(turn)
            pos += len(turn)
        assert t.loss_mask == expected_mask and len(ids) == pos
        assert [lp for lp, m in zip(t.rollout_logprobs, t.loss_mask) if m] == [-0.25] * sum(t.loss_mask)
        assert {v for v, m in zip(t.policy_versions, t.loss_mask) if m} == {VERSION}
        assert {v for v, m in zip(t.policy_versions, t.loss_mask) if not m} == ({-1} if len(model_ids) > 1 else set())
    # secret 8 is bisect's first guess: one turn; secret 11: 8 -> 12 -> 10 -> 11, four turns
    assert [t.episode["turns"] for t in trajs] == [4, 4, 1, 1]


def test_limits_end_episodes(tokenizer_for_tests):
    tok = tokenizer_for_tests
    never = ScriptedEngine(tok, lambda last, seed: "I guess 1")
    [t] = run_episodes(never, tok, guess_env(), prompts([9]), [0], SamplingParams(n=1, max_new_tokens=8),
                       EpisodeLimits(max_turns=3))
    assert (t.episode["end"], t.episode["turns"], t.reward, t.finish_reason) == ("max_turns", 3, 0.0, "length")
    [t] = run_episodes(never, tok, guess_env(), prompts([9]), [0], SamplingParams(n=1, max_new_tokens=8),
                       EpisodeLimits(max_turns=50, max_total_tokens=60))
    # the observation that would pass the limit is not appended: the episode ends within it
    assert t.episode["end"] == "max_total_tokens" and len(t.prompt.prompt_ids) + len(t.response_ids) <= 60
    assert t.episode["turns"] > 1


RELEASE = threading.Event()


class FlakyEnv:
    """Behaves by the prompt's ground truth: ok, reset_raises, step_raises, hangs, garbage, nan."""

    def reset(self, task):
        self.mode = task.ground_truth
        if self.mode == "reset_raises":
            raise RuntimeError("no such level")
        return [{"role": "user", "content": "go"}]

    def step(self, action):
        if self.mode == "step_raises":
            raise KeyError("boom")
        if self.mode == "hangs":
            RELEASE.wait(60)
        if self.mode == "garbage":
            return ("not", "a", "StepResult")
        if self.mode == "nan":
            return StepResult([], reward=float("nan"), terminated=True)
        return StepResult([], reward=1.0, terminated=True, info={"success": True})


def test_failures_end_only_their_episode_and_are_counted(tokenizer_for_tests):
    tok = tokenizer_for_tests
    engine = ScriptedEngine(tok, lambda last, seed: "ok")
    modes = ["ok", "reset_raises", "step_raises", "hangs", "garbage", "nan"]
    ps = [Prompt(uid=m, prompt_ids=[1], prompt_text="", ground_truth=m) for m in modes]
    rollout = EnvRollout.__new__(EnvRollout)   # the rollout's scoring around a hand-made env factory
    rollout.engine, rollout.tokenizer, rollout.reward, rollout.use_verifiers = engine, tok, None, False
    rollout.limits, rollout.tools, rollout.make_env = EpisodeLimits(step_timeout_s=0.5), None, FlakyEnv
    rollout.programs = None
    try:
        trajs = rollout.generate(ps, list(range(len(ps))), SamplingParams(n=1, max_new_tokens=4))
    finally:
        RELEASE.set()
    metrics = rollout.score(trajs, 4)
    by = {t.prompt.uid: t for t in trajs}
    assert by["ok"].episode["end"] == "terminated" and by["ok"].correct and by["ok"].loss_mask == [1, 1]
    errors = {m: by[m].episode["error"] for m in modes[1:]}
    assert "reset: RuntimeError: no such level" in errors["reset_raises"]
    assert "KeyError" in errors["step_raises"]
    assert "did not return within 0.5 s" in errors["hangs"]
    assert "must return rlxf.envs.StepResult" in errors["garbage"]
    assert "finite number" in errors["nan"]
    for m in modes[1:]:
        assert by[m].finish_reason == "error" and not any(by[m].loss_mask) and by[m].reward == 0.0
    assert metrics["env/episode_errors"] == 5 and metrics["env/step_timeouts"] == 1


def test_per_turn_credit_reaches_the_advantages(tokenizer_for_tests):
    """Turn rewards land on each turn's last model token; REINFORCE's reward-to-go (baseline 0 on
    the first batch) gives turn k's tokens Σ_{j≥k} r_j, and environment tokens get 0."""
    tok = tokenizer_for_tests
    engine = ScriptedEngine(tok, bisect_policy)
    trajs = run_episodes(engine, tok, guess_env(turn_penalty=-0.25), prompts([12]), [3],
                         SamplingParams(n=1, max_new_tokens=16), EpisodeLimits(max_turns=4, credit="per_turn"))
    [t] = trajs                                   # 8 (higher) -> 12: two turns
    assert t.episode["turn_rewards"] == [-0.25, 1.0] and t.reward == 0.75
    ends = [i for i, m in enumerate(t.loss_mask) if m and (i + 1 == len(t.loss_mask) or not t.loss_mask[i + 1])]
    assert [i for i, r in enumerate(t.token_rewards) if r] == ends
    maker = ExperienceMaker.from_config(AlgorithmConfig(name="grpo", advantage="reinforce"), 16, 1)
    exp, _ = maker(trajs, None, None, None, 0.0)
    mask = torch.tensor(t.loss_mask, dtype=torch.float32)
    assert torch.equal(exp.mask[0], mask)
    first_turn = torch.zeros_like(mask)
    first_turn[: ends[0] + 1] = 1
    expected = mask * (first_turn * 0.75 + (1 - first_turn) * 1.0)
    torch.testing.assert_close(exp.advantages[0], expected)
    assert torch.equal(exp.policy_versions[0], torch.tensor(t.policy_versions))


def test_episode_credit_gives_group_advantages_on_model_tokens_only(tokenizer_for_tests):
    tok = tokenizer_for_tests
    engine = ScriptedEngine(tok, lambda last, seed: f"I guess {1 + seed % 16}")
    trajs = run_episodes(engine, tok, guess_env(), prompts([5]), [0], SamplingParams(n=4, max_new_tokens=8),
                         EpisodeLimits(max_turns=2))
    maker = ExperienceMaker.from_config(AlgorithmConfig(name="grpo"), 8, 1)
    exp, _ = maker(trajs, None, None, None, 0.0)
    env_tokens = (exp.mask == 0)
    assert exp.advantages[env_tokens].abs().sum() == 0
    for i, t in enumerate(trajs):
        assert exp.mask[i, : len(t.loss_mask)].tolist() == [float(m) for m in t.loss_mask]


def test_env_config_errors_name_the_problem(tokenizer_for_tests):
    with pytest.raises(ValueError, match="unknown environment 'nope'.*guess_number"):
        EnvRollout(EnvConfig(name="nope"), None, tokenizer_for_tests)
    with pytest.raises(ValueError, match="does not accept env.options"):
        EnvRollout(EnvConfig(name="guess_number", options={"colour": 1}), None, tokenizer_for_tests)
    with pytest.raises(ValueError, match="takes no tools"):
        EnvRollout(EnvConfig(name="guess_number", tools=["calculator"]), None, tokenizer_for_tests)
    with pytest.raises(ValueError, match="cannot import module 'no_such_pkg.envs'"):
        EnvRollout(EnvConfig(name="no_such_pkg.envs:Game"), None, tokenizer_for_tests)


def test_guess_number_task_splits_are_disjoint_and_in_range():
    from rlxf.data.errors import DataError
    from rlxf.data.tasks import check_disjoint, get_task

    task = get_task("guess_number", {"low": 3, "high": 9})
    train, test = task.splits(50, 10, seed=1)
    check_disjoint(train, test, task.name)
    assert {int(it.answer) for it in train + test} <= set(range(3, 10))
    assert task.splits(50, 10, seed=1) == (train, test)
    assert task.score("I guess 7", "7", {}) == 1.0 and task.score("no", "7", {}) == 0.0
    with pytest.raises(DataError, match=r"'guess_number': hi: Extra inputs are not permitted. Valid options: low, high"):
        get_task("guess_number", {"hi": 3})


class ConstantReward:
    """A reward function scoring every response 0.5 (``rlxf.rewards`` interface)."""

    def score(self, inputs):
        from rlxf.rewards.types import ScoredSample

        self.seen = inputs
        return [ScoredSample(reward=0.5, scores={"half": 0.5}, correct=True) for _ in inputs]


def test_single_turn_env_keeps_todays_tasks_working(tokenizer_for_tests):
    """The data prompt's own ids, one model turn with mask 1, scored by the verifiers."""
    tok = tokenizer_for_tests
    from rlxf.data.templates import encode_prompt

    ids, text = encode_prompt(tok, "12+34=")
    reward = ConstantReward()
    rollout = EnvRollout(EnvConfig(name="single_turn", use_verifiers=True), ScriptedEngine(tok, lambda t, s: "46"),
                         tok, reward)
    trajs = rollout.generate([Prompt(uid="a:0", prompt_ids=ids, prompt_text=text, ground_truth="46")], [0],
                             SamplingParams(n=2, max_new_tokens=8))
    rollout.score(trajs, 8)
    for t in trajs:
        assert t.prompt.prompt_ids == ids and t.response_ids == encode_text(tok, "46") + [tok.eos_token_id]
        assert t.loss_mask == [1] * len(t.response_ids) and t.response_text == "46"
        assert (t.reward, t.correct, t.scores) == (0.5, True, {"half": 0.5, "env": 0.0})
    assert reward.seen[0].metadata["conversation"][-1] == {"role": "assistant", "content": "46"}



def test_env_config_takes_one_driver_and_agent_errors_name_it(tokenizer_for_tests):
    from pydantic import ValidationError

    from rlxf.envs.base import EnvError

    for bad in ({}, {"name": "guess_number", "agent": "m:f"}, {"agent": "m:f", "agent_command": ["python", "a.py"]}):
        with pytest.raises(ValidationError, match="exactly one of env.name"):
            EnvConfig(**bad)
    with pytest.raises(ValidationError, match="an agent program runs its own tools"):
        EnvConfig(agent="m:f", tools=["calculator"])
    with pytest.raises(EnvError, match="env.agent='no_such_module_x:run'.*cannot import"):
        EnvRollout(EnvConfig(agent="no_such_module_x:run"), None, tokenizer_for_tests)
    with pytest.raises(EnvError, match="env.agent='env_plugins:HANG' is not callable"):
        EnvRollout(EnvConfig(agent="env_plugins:HANG"), None, tokenizer_for_tests)


def test_gymnasium_text_environments_through_the_adapter(tokenizer_for_tests):
    gymnasium = pytest.importorskip("gymnasium")
    from rlxf.envs.base import EnvError

    if "rlxf_test/SecretWord-v0" not in gymnasium.registry:
        gymnasium.register(id="rlxf_test/SecretWord-v0", entry_point="gym_plugins:SecretWord")
    with pytest.raises(EnvError, match="env.options.id='rlxf_test/Nope-v0'"):
        build_env("gymnasium", {"id": "rlxf_test/Nope-v0"})
    engine = ScriptedEngine(tokenizer_for_tests, lambda text, seed: "apple" if "No, again" in text else "pear")
    ps = [Prompt(uid=f"w:{i}", prompt_ids=[1], prompt_text="", ground_truth=w) for i, w in enumerate(("apple", "kiwi"))]
    make = lambda: build_env("gymnasium", {"id": "rlxf_test/SecretWord-v0", "kwargs": {"tries": 2}})  # noqa: E731
    won, lost = run_episodes(engine, tokenizer_for_tests, make, ps, [0, 1], SamplingParams(n=1, max_new_tokens=4),
                             EpisodeLimits(max_turns=4))
    assert [m["content"] for m in won.episode["messages"]] == ["Say the word.", "pear", "No, again.", "apple"]
    assert won.episode["turn_rewards"] == [0.0, 1.0] and won.episode["end"] == "terminated"
    assert won.episode["infos"][-1] == {"success": True}
    assert lost.episode["end"] == "truncated" and lost.reward == 0.0 and lost.episode["turns"] == 2
