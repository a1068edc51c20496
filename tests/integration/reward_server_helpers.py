"""A reward server on a free loopback port, in a thread, for the tests of the reward service."""

from __future__ import annotations

import contextlib
import threading
import time

import uvicorn


@contextlib.contextmanager
def server_in_thread(config: uvicorn.Config, start_timeout_s: float = 20.0):
    """Run ``config``'s uvicorn server in a daemon thread for the block; yield the port it bound
    (give ``port=0`` for a free one). The server is told to exit and joined on the way out."""
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        assert thread.is_alive(), "the reward server stopped while starting"
        assert time.monotonic() < deadline, "the reward server did not start"
        time.sleep(0.02)
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(10)
