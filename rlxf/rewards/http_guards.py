"""What a service exposed to a network needs around its app: a bearer token, a body-size limit,
header and body timeouts, and logs that a flood of bad clients cannot flood.

- ``Guard``: ASGI middleware. Checks the token (constant-time), refuses a body over the limit
  from its ``Content-Length`` (or as it streams), reads the body with a deadline per piece,
  then hands the app the body it read and, after it, the real ``receive`` -- so the app still
  learns when its client hangs up (``Request.is_disconnected``).
- ``guarded_h11``: uvicorn's h11 protocol plus a header deadline: a connection that opens and
  sends nothing (or dribbles its headers) is closed after ``header_timeout_s``, and so is a
  kept-alive one that starts a request and never finishes its headers.
- ``RateLimitFilter``: at most N records a minute per message kind; the rest are counted and
  reported in one line when the minute turns.

Importing this needs ``rlxf[serve]`` (uvicorn, h11).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

log = logging.getLogger("rlxf.rewards.server")
Scope = dict[str, Any]


class Guard:
    """ASGI middleware: token, body limit, body timeout (see the module doc)."""

    def __init__(self, app: Any, *, token: str | None, max_body_bytes: int, body_timeout_s: float):
        self.app = app
        self.token = token.encode() if token else None
        self.max_body = max_body_bytes
        self.body_timeout = body_timeout_s

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        if self.token is not None:
            given = headers.get(b"authorization", b"")
            if not hmac.compare_digest(given, b"Bearer " + self.token):
                log.warning("refused a request without the right bearer token from %s", _who(scope))
                await _reply(send, 401, "a bearer token is required: send `Authorization: Bearer <token>` "
                                        "(RemoteReward sends the reward.server.token_env variable's value)")
                return
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            await _reply(send, 413, f"request body of {int(length)} bytes exceeds the limit of {self.max_body} "
                                    "(reward.server.max_body_mb); send smaller batches")
            return
        body, problem = await self._read_body(receive)
        if problem is not None:
            status, message = problem
            log.warning("%s from %s", message, _who(scope))
            await _reply(send, status, message)
            return
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # http.disconnect when the client goes away

        await self.app(scope, replay, send)

    async def _read_body(self, receive: Any) -> tuple[bytes, tuple[int, str] | None]:
        chunks, size = [], 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), self.body_timeout)
            except asyncio.TimeoutError:
                return b"", (408, f"no request body data for {self.body_timeout:g}s "
                                  "(reward.server.body_timeout_s)")
            if message["type"] == "http.disconnect":
                return b"", (400, "the client hung up before sending its whole body")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body:
                return b"", (413, f"request body exceeds the limit of {self.max_body} bytes "
                                  "(reward.server.max_body_mb); send smaller batches")
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks), None


def _who(scope: Scope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "an unknown client"


async def _reply(send: Any, status: int, message: str) -> None:
    body = json.dumps({"detail": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


def guarded_h11(header_timeout_s: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a deadline for each request's headers."""

    class GuardedH11(H11Protocol):
        _deadline: asyncio.TimerHandle | None = None
        _cycle_seen: Any = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.cycle is not None and self.cycle is not self._cycle_seen:
                self._cycle_seen = self.cycle  # a request's headers are complete: in time
                self._disarm()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm()  # the next request on this connection gets the same deadline

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(header_timeout_s, self._expired)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expired(self) -> None:
            self._deadline = None
            if self.cycle is not None and not self.cycle.response_complete:
                return  # a request is being served: not ours to cut
            if not self.transport.is_closing():
                log.warning("closed a connection from %s that sent no complete request headers within "
                            "%gs (reward.server.header_timeout_s)", _client(self), header_timeout_s)
                self.transport.close()

    return GuardedH11


def _client(protocol: H11Protocol) -> str:
    client = getattr(protocol, "client", None)
    return f"{client[0]}:{client[1]}" if client else "an unknown client"


class RateLimitFilter(logging.Filter):
    """At most ``per_minute`` records per (logger, message format) each minute; the rest are
    dropped and counted, and the first record of the next minute says how many were."""

    def __init__(self, per_minute: int):
        super().__init__()
        self.per_minute = per_minute
        self._window = 0
        self._counts: dict[tuple[str, str], int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        window = int(time.monotonic() // 60)
        if window != self._window:
            dropped = sum(max(0, n - self.per_minute) for n in self._counts.values())
            self._window, self._counts = window, {}
            if dropped:
                record.msg = f"{record.msg} [{dropped} log lines suppressed in the last minute]"
        self._counts[key] = self._counts.get(key, 0) + 1
        return self._counts[key] <= self.per_minute
