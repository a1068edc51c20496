"""Async mode's episodes (``EpisodeStream``) when the run ends with episodes still running, as
every run with ``rollout.max_staleness`` >= 1 does: closing the placement ends them, and each
has closed its environments before the close returns (the process exits right after, and a
daemon thread still in ``env.close()`` then would leave what it holds, a process, a container).

The engine is ``serve`` in miniature, forked (no model: milliseconds), which answers nothing:
the episodes wait on it, as they do on a busy engine."""

from __future__ import annotations

import threading
import time

import pytest

from rlxf.config.env import EnvConfig
from rlxf.envs.agent import EpisodeLimits
from rlxf.envs.base import EnvError
from rlxf.envs.programs import ProgramEpisodes
from rlxf.envs.rollout import EnvRollout, EpisodeStream
from rlxf.rollout import SamplingParams, process
from rlxf.rollout.stream import GroupRequest
from rlxf.types import Prompt


class ClosingEnv:
    """Closes slowly (what it holds takes a moment to release), and counts."""

    made = 0
    closed = 0
    lock = threading.Lock()

    def __init__(self):
        with ClosingEnv.lock:
            ClosingEnv.made += 1

    def reset(self, task):
        return [{"role": "user", "content": "go"}]

    def step(self, action):
        raise AssertionError("the engine answers nothing: no step is taken")

    def close(self):
        time.sleep(0.3)
        with ClosingEnv.lock:
            ClosingEnv.closed += 1


def _serve(recipe, weights, version, commands, connection, parent) -> None:
    process._die_with(parent)
    connection.send(("loaded", version))
    while commands.get()[0] != "close":
        pass
    connection.close()


@pytest.fixture
def engine(forked_engine):
    return forked_engine(_serve)


def test_closing_with_episodes_running_ends_them_and_closes_their_environments(engine, tokenizer_for_tests):
    ClosingEnv.made = ClosingEnv.closed = 0
    rollout = EnvRollout(EnvConfig(name=f"{__name__}:ClosingEnv", max_turns=2), engine, tokenizer_for_tests)
    made_by_probe = ClosingEnv.made   # the constructor's probe, closed already
    stream = EpisodeStream(rollout)
    prompt = Prompt(uid="p", prompt_text="go", prompt_ids=[1, 2])
    stream.submit([GroupRequest(prompt, 1, group=0), GroupRequest(prompt, 2, group=1)],
                  SamplingParams(n=2, max_new_tokens=4))
    while len(engine._inflight) < 4:   # every episode waits for its first model turn
        time.sleep(0.01)
    rollout.close()    # LocalPlacement.close: the rollout, then the engine
    engine.close()
    assert ClosingEnv.made == made_by_probe + 4
    assert ClosingEnv.closed == ClosingEnv.made
    with pytest.raises(process.EngineLost, match="closed"):   # what the episodes ended with
        stream.ready(timeout=0)


def test_a_program_run_that_waited_its_turn_past_the_close_starts_no_endpoint(tokenizer_for_tests):
    """Agent programs' runs take turns (one endpoint, one call's sampling); a run still waiting
    its turn when the run ended got it after ``close`` and served a new endpoint nobody closed."""
    calls = []
    programs = ProgramEpisodes(lambda url, task: calls.append(url) or 1.0, None, tokenizer_for_tests,
                               EpisodeLimits(), 5.0)
    programs.close()
    prompt = Prompt(uid="p", prompt_text="go", prompt_ids=[1, 2])
    with pytest.raises(EnvError, match="closed"):
        programs.run([prompt], [1], SamplingParams(n=1, max_new_tokens=4))
    assert programs._server is None and calls == []
    # a run that had its turn already when the close came (past the turn's check) starts none either
    with pytest.raises(EnvError, match="closed"):
        programs._run([prompt], [1], SamplingParams(n=1, max_new_tokens=4), 0)
    assert programs._server is None and calls == []
