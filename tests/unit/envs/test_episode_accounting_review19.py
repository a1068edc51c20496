"""Episode accounting under adversarial inputs: per-turn credit keeps every turn's reward, the chat
endpoint counts only sampled turns as model turns, a non-finite reward is refused, not recorded,
and the endpoint's per-token ``bytes`` are the tokens' own bytes."""

from __future__ import annotations

import math

import pytest

from rlxf.envs.agent import EpisodeLimits, run_episodes
from rlxf.envs.base import StepResult
from rlxf.envs.chat_server import EpisodeRecorder, HistoryMismatch
from rlxf.envs.tokens import encode_text
from rlxf.rollout import SamplingParams
from rlxf.types import Completion, Prompt


class FirstTurnEmptyEngine:
    """Answers the first request with no token at all (a stop string hit at once), then "x" + eos."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, 0

    def generate(self, requests, sampling):
        out = []
        for _ in requests:
            self.calls += 1
            ids = [] if self.calls == 1 else encode_text(self.tokenizer, "x") + [self.tokenizer.eos_token_id]
            out.append([Completion(ids, [-0.5] * len(ids), "stop", 1)])
        return out


class TwoStepsEnv:
    """Pays 1.0 for each of two turns, then ends."""

    def reset(self, task):
        self.turns = 0
        return [{"role": "user", "content": "go"}]

    def step(self, action):
        self.turns += 1
        return StepResult([{"role": "user", "content": "more"}], reward=1.0, terminated=self.turns == 2)


def test_per_turn_reward_of_a_first_turn_without_tokens_is_not_dropped(tokenizer_for_tests):
    tok = tokenizer_for_tests
    [t] = run_episodes(FirstTurnEmptyEngine(tok), tok, TwoStepsEnv, [Prompt(uid="p", prompt_ids=[1], prompt_text="")],
                       [0], SamplingParams(n=1, max_new_tokens=8), EpisodeLimits(credit="per_turn"))
    assert t.episode["turn_rewards"] == [1.0, 1.0] and t.reward == 2.0
    model = [i for i, m in enumerate(t.loss_mask) if m]
    assert len(model) == 2   # "x" and eos of the second turn
    # turn 1 has no token: its reward lands on the first model token; turn 2's on its last
    expected = [0.0] * len(t.response_ids)
    expected[model[0]], expected[model[-1]] = 1.0, 1.0
    assert t.token_rewards == expected
    assert sum(t.token_rewards) == t.reward


class HelloEngine:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def generate(self, requests, sampling):
        ids = encode_text(self.tokenizer, "hello") + [self.tokenizer.eos_token_id]
        return [[Completion(ids, [-0.5] * len(ids), "stop", 3)] for _ in requests]


def test_endpoint_refuses_an_assistant_message_it_did_not_write(tokenizer_for_tests):
    """A program-written assistant message would count as a model turn: past max_turns, the
    agent loop's seeds and tool-call ids shifted. The agent loop refuses it; so does the endpoint."""
    tok = tokenizer_for_tests
    recorder = EpisodeRecorder(HelloEngine(tok), tok, max_turns=2)
    messages = [{"role": "user", "content": "hi"}]
    turn = recorder.complete("e", messages)
    messages += [{"role": "assistant", "content": turn.text}, {"role": "user", "content": "again"},
                 {"role": "assistant", "content": "FAKE"}, {"role": "user", "content": "and?"}]
    with pytest.raises(HistoryMismatch, match="message 3 is an assistant message this endpoint did not write"):
        recorder.complete("e", messages)
    conv = recorder.episodes["e"]
    assert conv.model_turns == 1 and conv.messages[-1] == {"role": "assistant", "content": "hello"}
    # without the invented turn the episode goes on, its second turn numbered 1
    assert recorder.complete("e", messages[:3]).index == 1
    # the first request's assistant messages are history (few-shot), as in the agent loop's reset
    shots = [{"role": "user", "content": "1+1"}, {"role": "assistant", "content": "2"}, {"role": "user", "content": "hi"}]
    assert recorder.complete("f", shots).index == 0


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, True, "1.0"])
def test_a_non_finite_episode_reward_is_refused(tokenizer_for_tests, bad):
    tok = tokenizer_for_tests
    recorder = EpisodeRecorder(HelloEngine(tok), tok)
    recorder.complete("e", [{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match="'e': reward .* must be a finite number"):
        recorder.set_reward("e", bad)
    recorder.set_reward("e", 0.5)
    [t] = recorder.trajectories()
    assert t.reward == 0.5


def test_the_reward_endpoint_answers_a_nan_reward_with_a_400(tokenizer_for_tests):
    from fastapi.testclient import TestClient

    from rlxf.envs.chat_server import create_app

    tok = tokenizer_for_tests
    recorder = EpisodeRecorder(HelloEngine(tok), tok)
    recorder.complete("e", [{"role": "user", "content": "hi"}])
    client = TestClient(create_app(recorder))
    # Python's json (what OpenAI clients in Python send) writes NaN as a bare NaN literal
    r = client.post("/v1/rlxf/reward", content='{"episode": "e", "reward": NaN}',
                    headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert "finite" in r.json()["error"]["message"]
    assert "e" not in recorder.rewards


def test_logprob_bytes_of_tokens_that_split_a_character_join_back_into_it(tokenizer_for_tests):
    """An emoji is four byte tokens, each decoding alone to U+FFFD; OpenAI's ``bytes`` must be the
    token's own bytes, or a client cannot rebuild the text (it got EF BF BD four times)."""
    from rlxf.envs.chat_protocol import ModelTurn, token_logprobs

    tok = tokenizer_for_tests
    text = "\N{SLIGHTLY SMILING FACE} \u00e9 ok"
    ids = encode_text(tok, text) + [tok.eos_token_id]
    entries = token_logprobs(tok, ModelTurn(0, text, "stop", ids, [-0.1] * len(ids), 3))
    assert b"".join(bytes(e["bytes"]) for e in entries) == (text + "<|im_end|>").encode()
    assert b"\xef\xbf\xbd" not in b"".join(bytes(e["bytes"]) for e in entries)


class ByteFallbackTokenizer:
    """A SentencePiece-style vocabulary: whole pieces, and bytes as ``<0xNN>`` pieces."""

    PIECES = {0: "<0xC3>", 1: "<0xA9>", 2: "\u2581ok", 3: "\ufffd"}

    def decode(self, ids, skip_special_tokens=False):
        return "".join(" ok" if i == 2 else "\ufffd" for i in ids)

    def convert_ids_to_tokens(self, token_id):
        return self.PIECES[token_id]


def test_logprob_bytes_of_byte_fallback_pieces():
    from rlxf.envs.chat_protocol import ModelTurn, token_logprobs

    entries = token_logprobs(ByteFallbackTokenizer(), ModelTurn(0, "\u00e9 ok", "stop", [0, 1, 2, 3], [0.0] * 4, 0))
    assert [e["bytes"] for e in entries] == [[0xC3], [0xA9], list(b" ok"), list("\ufffd".encode())]


class EndsOnText:
    """A Gymnasium-API environment whose last observation is its verdict, then one that ends on None."""

    def __init__(self, last):
        self.last = last

    def reset(self, *, seed=None, options=None):
        return "Say the word.", {}

    def step(self, action):
        return self.last, 1.0, True, False, {"success": True}

    def close(self):
        pass


@pytest.mark.parametrize(("last", "kept"), [("Yes, it was apple.", [{"role": "user", "content": "Yes, it was apple."}]),
                                            (None, []), ([1, 2], [])])
def test_a_gymnasium_episodes_last_observation_is_kept(tokenizer_for_tests, last, kept):
    """samples.jsonl's final_observation holds what the environment said last, as for any other
    environment; one that ends on no text ends on nothing, not in error."""
    from rlxf.envs.builtin import GymnasiumEnv

    env = GymnasiumEnv.__new__(GymnasiumEnv)   # the adapter around a ready-made environment
    env.env = EndsOnText(last)
    [t] = run_episodes(HelloEngine(tokenizer_for_tests), tokenizer_for_tests, lambda: env,
                       [Prompt(uid="w", prompt_ids=[1], prompt_text="")], [0], SamplingParams(n=1, max_new_tokens=8),
                       EpisodeLimits())
    assert t.episode["end"] == "terminated" and t.reward == 1.0
    assert t.episode["final_observation"] == kept
