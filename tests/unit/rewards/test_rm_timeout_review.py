"""A reward-model call past reward.timeout_s starts no more forwards: the calls queued behind
a slow forward, and the rest of a batch whose caller gave up, are skipped, not run unread."""

from __future__ import annotations

import asyncio
import threading

import pytest
import torch

from rlxf.config.reward import RewardConfig
from rlxf.models import ValueModel, load_tokenizer
from rlxf.rewards import LocalReward, RewardInput
from rlxf.rewards.reward_model import RewardModelVerifier


class HeldHead(torch.nn.Module):
    """The value head, made to wait for ``release`` before each forward finishes; counts forwards."""

    def __init__(self, head: torch.nn.Module):
        super().__init__()
        self.head = head
        self.release = threading.Event()
        self.forwards = 0

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        self.forwards += 1
        self.release.wait()
        return self.head(hidden)


@pytest.fixture
def held(nano_model_dir):
    model = ValueModel.from_pretrained(nano_model_dir, device="cpu")
    model.value_head = HeldHead(model.value_head)
    verifier = RewardModelVerifier("rm", model, load_tokenizer(nano_model_dir), batch_size=1)
    yield verifier, model.value_head
    model.value_head.release.set()
    verifier.close()


def _finish(loop: asyncio.AbstractEventLoop, verifier: RewardModelVerifier, head: HeldHead) -> None:
    """Let the held forward end, and wait for every thread that could still run one."""
    head.release.set()
    loop.run_until_complete(loop.shutdown_default_executor())
    verifier.close()
    loop.close()


def test_calls_that_timed_out_behind_a_slow_forward_run_no_forward(held):
    verifier, head = held
    cfg = RewardConfig.model_validate({"verifiers": [{"type": "reward_model", "path": "unused", "name": "rm"}],
                                       "timeout_s": 0.05})
    scorer = LocalReward(cfg, verifiers={"rm": verifier})
    loop = asyncio.new_event_loop()
    out = loop.run_until_complete(scorer.ascore([RewardInput("q", f"answer {i}") for i in range(3)]))
    assert [s.failures["rm"].kind for s in out] == ["timeout"] * 3
    _finish(loop, verifier, head)
    assert head.forwards <= 1   # the one already running when its call timed out; never the two queued


def test_a_batch_whose_caller_gave_up_stops_before_its_next_chunk(held):
    verifier, head = held
    loop = asyncio.new_event_loop()
    xs = [RewardInput("q", f"answer {i}") for i in range(3)]   # three chunks of batch_size 1
    with pytest.raises(asyncio.TimeoutError):
        loop.run_until_complete(asyncio.wait_for(verifier.ascore_batch(xs), 0.05))
    _finish(loop, verifier, head)
    assert head.forwards <= 1


def test_the_verifier_scores_again_after_a_timeout(held, nano_model_dir):
    verifier, head = held
    loop = asyncio.new_event_loop()
    with pytest.raises(asyncio.TimeoutError):
        loop.run_until_complete(asyncio.wait_for(verifier.ascore_batch([RewardInput("q", "a")]), 0.05))
    head.release.set()
    loop.close()
    plain = RewardModelVerifier("plain", ValueModel.from_pretrained(nano_model_dir, device="cpu"),
                                load_tokenizer(nano_model_dir))
    x = RewardInput("q", "b")
    assert verifier.score(x).score == pytest.approx(plain.score(x).score, abs=1e-5)
