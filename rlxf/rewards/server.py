"""The reward service: a ``RewardFunction`` behind HTTP (``rlxf serve-reward CONFIG``).

    GET  /health  -> {"status": "ok", "verifiers": [...], "accuracy": name, "max_batch_size": N,
                      "in_flight": k, "waiting": w}
    POST /score   {"samples": [RewardInput as JSON, ...]}
                  -> {"results": [ScoredSample as JSON, ...], "metrics": {...}}   (same order)

Bounded work: at most ``max_concurrent_batches`` batches are scored at once and
``max_waiting`` more may wait; beyond that the server answers 503 (the client retries). A
batch over ``max_batch_size`` is a 413. A malformed request is a 422 naming the bad field.
Importing this module needs ``rlxf[serve]`` (FastAPI); ``import rlxf.rewards`` does not.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import BaseModel, ConfigDict, Field

from rlxf.config.reward import RewardServerConfig
from rlxf.rewards.scorer import RewardFunction
from rlxf.rewards.types import RewardInput, batch_metrics


class SampleIn(BaseModel):
    """One ``RewardInput`` on the wire."""

    model_config = ConfigDict(extra="forbid")
    prompt: str
    response: str
    ground_truth: Any = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    response_tokens: int | None = Field(None, ge=0)
    max_new_tokens: int | None = Field(None, ge=1)
    uid: str = ""


class ScoreRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    samples: list[SampleIn]


def create_app(scorer: RewardFunction, limits: RewardServerConfig | None = None) -> FastAPI:
    """The FastAPI app serving ``scorer``. The caller owns the scorer (and closes it)."""
    limits = limits or RewardServerConfig()
    app = FastAPI(title="rlxf reward server", version="1")
    gate = asyncio.Semaphore(limits.max_concurrent_batches)
    state = {"in_flight": 0, "waiting": 0}

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "verifiers": scorer.names, "accuracy": scorer.accuracy,
                "max_batch_size": limits.max_batch_size, **state}

    @app.post("/score")
    async def score(request: ScoreRequest) -> dict[str, Any]:
        n = len(request.samples)
        if n > limits.max_batch_size:
            raise HTTPException(413, f"batch of {n} samples exceeds max_batch_size={limits.max_batch_size}; "
                                     "split it (RemoteReward does) or raise reward.server.max_batch_size")
        if gate.locked() and state["waiting"] >= limits.max_waiting:
            raise HTTPException(503, f"overloaded: {state['in_flight']} batches scoring and {state['waiting']} "
                                     "waiting; retry later")
        inputs = [RewardInput(**s.model_dump()) for s in request.samples]
        state["waiting"] += 1
        try:
            await gate.acquire()
        finally:
            state["waiting"] -= 1
        state["in_flight"] += 1
        try:
            results = await scorer.ascore(inputs)
        finally:
            state["in_flight"] -= 1
            gate.release()
        return {"results": [r.to_json() for r in results], "metrics": batch_metrics(results)}

    return app
