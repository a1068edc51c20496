"""The reward service: a ``RewardFunction`` behind HTTP (``rlxf serve-reward CONFIG``).

    GET  /health  -> {"status": "ok", "verifiers": [...], "accuracy": name, "max_batch_size": N,
                      "in_flight": k, "waiting": w}
                     (503, "status": "unhealthy", "error": why, once the scorer cannot score)
    POST /score   {"samples": [RewardInput as JSON, ...]}
                  -> {"results": [ScoredSample as JSON, ...], "metrics": {...}}   (same order)

Bounded work: at most ``max_concurrent_batches`` batches are scored at once and
``max_waiting`` more may wait; beyond that the server answers 503 (the client retries). A
batch over ``max_batch_size`` is a 413. A malformed request is a 422 naming the bad field.
A client that hangs up mid-scoring has its batch cancelled (its sandbox jobs are killed), so
an abandoned request never delays the others.

Fit to expose (``http_guards``): a body-size limit, header and body timeouts, a bound on
connections, rate-limited logs, and a bearer token read from the environment variable
``reward.server.token_env`` -- required to bind anything but loopback (``check_bind``).
Importing this module needs ``rlxf[serve]`` (FastAPI); ``import rlxf.rewards`` does not.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import os
from typing import Any

import uvicorn
from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rlxf.config.reward import RewardServerConfig
from rlxf.rewards.http_guards import Guard, RateLimitFilter, guarded_h11
from rlxf.rewards.scorer import RewardFunction
from rlxf.rewards.types import RewardInput, batch_metrics

log = logging.getLogger(__name__)
DISCONNECT_POLL_S = 0.25  # how often a scoring request checks that its client is still there


class SampleIn(BaseModel):
    """One ``RewardInput`` on the wire."""

    model_config = ConfigDict(extra="forbid")
    prompt: str
    response: str
    ground_truth: Any = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    response_tokens: int | None = Field(None, ge=0, strict=True)   # true is not 1, nor "7" 7
    max_new_tokens: int | None = Field(None, ge=1, strict=True)
    uid: str = ""


class ScoreRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    samples: list[SampleIn]


def create_app(scorer: RewardFunction, limits: RewardServerConfig | None = None, *,
               token: str | None = None) -> Guard:
    """The ASGI app serving ``scorer``, behind ``http_guards.Guard`` (``token``: the bearer
    token requests must carry; None: no authentication). The caller owns the scorer."""
    limits = limits or RewardServerConfig()
    app = FastAPI(title="rlxf reward server", version="1")
    gate = asyncio.Semaphore(limits.max_concurrent_batches)
    state = {"in_flight": 0, "waiting": 0}

    @app.get("/health")
    async def health() -> Any:
        body = {"status": "ok", "verifiers": scorer.names, "accuracy": scorer.accuracy,
                "max_batch_size": limits.max_batch_size, **state}
        problem = getattr(scorer, "problem", None)
        if problem:  # e.g. no reward worker can be started: every /score would fail
            return JSONResponse({**body, "status": "unhealthy", "error": problem}, status_code=503)
        return body

    @app.post("/score")
    async def score(http: Request) -> dict[str, Any]:
        request = await _score_request(http)
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
            results = await _unless_abandoned(scorer.ascore(inputs), http)
        finally:
            state["in_flight"] -= 1
            gate.release()
        return {"results": [r.to_json() for r in results], "metrics": batch_metrics(results)}

    return Guard(app, token=token, max_body_bytes=int(limits.max_body_mb * (1 << 20)),
                 body_timeout_s=limits.body_timeout_s)


async def _score_request(http: Request) -> ScoreRequest:
    """The body as a ``ScoreRequest``, whatever its Content-Type (``curl -d`` sends a form's, and
    FastAPI would validate the text as a string); a 422 that says what is wrong otherwise."""
    raw = await http.body()
    try:
        data = json.loads(raw)
    except UnicodeDecodeError as e:
        raise HTTPException(422, f"the request body is not UTF-8 JSON ({e}); send {{\"samples\": [...]}}") from None
    except json.JSONDecodeError as e:
        raise HTTPException(422, f"the request body is not JSON: {e.msg} at line {e.lineno} column {e.colno}; "
                                 "send {\"samples\": [...]}") from None
    except (ValueError, RecursionError) as e:  # an integer of more than 4300 digits; nesting past the stack
        raise HTTPException(422, f"the request body is not JSON this server reads: {str(e)[:200]}") from None
    try:
        return ScoreRequest.model_validate(data)
    except ValidationError as e:  # FastAPI's own 422: each error's field path under "body"
        raise RequestValidationError([{**err, "loc": ("body", *err["loc"])}
                                      for err in e.errors(include_url=False)]) from None


async def _unless_abandoned(work: Any, http: Request) -> Any:
    """Await ``work``; cancel it if the client hangs up first (then nobody reads the answer)."""
    task = asyncio.ensure_future(work)
    while True:
        done, _ = await asyncio.wait({task}, timeout=DISCONNECT_POLL_S)
        if done:
            return task.result()
        if await http.is_disconnected():
            task.cancel()
            log.warning("client %s hung up: its batch was cancelled", http.client.host if http.client else "?")
            raise HTTPException(499, "client closed the request")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: str | None) -> None:
    """Refuse to expose the verifiers without a token; warn when binding every interface."""
    if not is_loopback(host) and not token:
        raise ValueError(f"binding {host} exposes the verifiers (which run submitted code) beyond this "
                         "machine: set a bearer token in the environment variable named by "
                         "reward.server.token_env (default RLXF_REWARD_TOKEN), or bind 127.0.0.1")
    if host in ("0.0.0.0", "::"):
        log.warning("the reward server listens on every network interface (%s); only clients with the "
                    "bearer token are served, but prefer the one interface trainers use", host)


def server_config(scorer: RewardFunction, limits: RewardServerConfig, host: str, port: int,
                  log_level: str = "info") -> uvicorn.Config:
    """The uvicorn configuration: the guarded app, the header deadline, the connection bound,
    rate-limited logs. The token comes from ``limits.token_env`` (see ``check_bind``)."""
    token = os.environ.get(limits.token_env) or None
    check_bind(host, token)
    for name in ("uvicorn.error", "uvicorn.access", __name__):
        logging.getLogger(name).addFilter(RateLimitFilter(limits.log_per_minute))
    return uvicorn.Config(create_app(scorer, limits, token=token), host=host, port=port, log_level=log_level,
                          http=guarded_h11(limits.header_timeout_s), limit_concurrency=limits.max_connections,
                          timeout_keep_alive=int(max(1, limits.header_timeout_s)))
