"""Where an RL run's roles live, behind one interface (``Placement``) the loop talks to.

``local``: every role in this process (the embedded default; no Ray import).
"""

from __future__ import annotations

from rlxf.config import Config
from rlxf.placement.base import Placement
from rlxf.run_dir import RunDir


def build(cfg: Config, **objects) -> Placement:
    """The placement ``run.placement`` names, built for ``cfg`` (models loaded, engine ready).

    ``objects``: in-memory ``model``, ``tokenizer`` and ``reward`` to use instead of building
    them from the config (the Python API, ``rlxf.train``).
    """
    if cfg.run.placement == "local":
        from rlxf.placement.local import LocalPlacement

        return LocalPlacement.from_config(cfg, **objects)
    raise ValueError(f"unknown run.placement {cfg.run.placement!r}; valid: local")


def run_training(cfg: Config, run: RunDir, *, resume: bool = False, **objects) -> dict[str, float]:
    """Build the configured placement, run the RL loop in it, close it; the last step's metrics.
    ``objects``: in-memory model / tokenizer / reward (see ``build``)."""
    import torch

    from rlxf.trainer.loop import train

    torch.manual_seed(cfg.seeds.init)  # model initialisation (a value head)
    with build(cfg, **objects) as placement:
        return train(cfg, run, placement, resume=resume)


__all__ = ["Placement", "build", "run_training"]
