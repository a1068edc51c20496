"""`rlxf serve-reward CONFIG`: serve the config's verifiers over HTTP for remote trainers.

The config may be a whole training config (the same file the trainer uses, minus
``reward.url``) or one holding only a ``reward:`` section. Trainers point ``reward.url`` at
``http://HOST:PORT``.
"""

from __future__ import annotations

import logging
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
        log.info("serving verifiers %s on http://%s:%d (workers=%d, timeout %.0fs)", scorer.names, host, port,
                 cfg.workers, cfg.timeout_s)
        try:
            config = server_config(scorer, cfg.server, host, port)
        except ValueError as e:
            raise UsageError(str(e)) from None
        uvicorn.Server(config).run()
