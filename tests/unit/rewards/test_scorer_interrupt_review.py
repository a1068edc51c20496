"""A KeyboardInterrupt inside a reward function stops scoring cleanly: the other verifiers' tasks
are cancelled and awaited, and the interrupt reaches the caller."""

import asyncio
import gc

import pytest

from rlxf.config.reward import RewardConfig
from rlxf.rewards.scorer import LocalReward, gather_all
from rlxf.rewards.types import RewardInput


class Waiting:
    name = "waiting"
    concurrency = 4

    def __init__(self):
        self.events: list[str] = []

    async def ascore_batch(self, xs):
        self.events.append("started")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.events.append("cancelled")
            raise

    def close(self):
        pass


class Interrupted:
    name = "interrupted"

    async def ascore_batch(self, xs):
        await asyncio.sleep(0)
        raise KeyboardInterrupt

    def close(self):
        pass


def test_keyboard_interrupt_in_a_verifier_cancels_the_others(caplog):
    cfg = RewardConfig.model_validate({"verifiers": [
        {"type": "custom", "function": "m:waiting", "name": "waiting"},
        {"type": "custom", "function": "m:interrupted", "name": "interrupted"}]})
    waiting = Waiting()
    scorer = LocalReward(cfg, verifiers={"waiting": waiting, "interrupted": Interrupted()})
    with pytest.raises(KeyboardInterrupt):
        scorer.score([RewardInput("p", "a"), RewardInput("p", "b")])
    gc.collect()
    assert waiting.events == ["started", "started", "cancelled", "cancelled"]
    assert "never retrieved" not in caplog.text and "destroyed but it is pending" not in caplog.text


def test_gather_all_keeps_order_and_raises_the_first_error():
    async def value(v):
        await asyncio.sleep(0)
        return v

    async def fail():
        raise ValueError("bad")

    assert asyncio.run(gather_all([value(2), value(1)])) == [2, 1]
    with pytest.raises(ValueError, match="bad"):
        asyncio.run(gather_all([value(1), fail()]))
