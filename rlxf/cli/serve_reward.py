"""`rlxf serve-reward CONFIG`: serve the config's verifiers over HTTP for remote trainers.

The config may be a whole training config (the same file the trainer uses, minus
``reward.url``) or one holding only a ``reward:`` section. Trainers point ``reward.url`` at
``http://HOST:PORT``.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path

from rlxf.cli.errors import UsageError

log = logging.getLogger(__name__)
# A reward-only config still has to validate as a whole Config: these stand in for the
# sections the server never uses (a training config's own sections replace them).
_UNUSED_SECTIONS = {"model": {"path": "(unused by serve-reward)"}, "data": {"task": "arithmetic"}}


def run(config_path: Path, overrides: list[str], host: str = "127.0.0.1", port: int = 8008) -> None:
    from rlxf.config import load_config

    cfg = load_config(config_path, overrides, base=dict(_UNUSED_SECTIONS)).reward
    if cfg.url:
        raise UsageError(f"{config_path}: reward.url is set ({cfg.url}); the server scores with its own "
                         "verifiers -- remove reward.url (or override reward.url=null) to serve them")
    try:
        import uvicorn

        from rlxf.rewards.server import server_config
    except ImportError as e:
        raise UsageError(f"serve-reward needs the web stack: pip install 'rlxf[serve]' ({e})") from None
    from rlxf.rewards import LocalReward

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    with LocalReward(cfg) as scorer:
        try:
            config = server_config(scorer, cfg.server, host, port)
        except ValueError as e:
            raise UsageError(str(e)) from None
        sock = _bind(host, port)
        log.info("serving verifiers %s on http://%s:%d (workers=%d, timeout %.0fs)", scorer.names, host,
                 sock.getsockname()[1], cfg.workers, cfg.timeout_s)
        uvicorn.Server(config).run(sockets=[sock])


def _bind(host: str, port: int) -> socket.socket:
    """The server's listening socket, bound here (as uvicorn binds it) so that an address in use
    or a host that is not this machine's is a usage error naming --host/--port, not uvicorn's exit 3."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except (OSError, OverflowError) as e:
        sock.close()
        reason = getattr(e, "strerror", None) or str(e)
        raise UsageError(f"cannot serve on --host {host} --port {port}: {reason}; pick a free port (--port) "
                         f"or an address of this machine (--host)") from None
    sock.set_inheritable(True)
    return sock
