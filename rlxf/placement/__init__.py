"""Where an RL run's roles live, behind one interface (``Placement``) the loop talks to.

``local``: every role in this process (the embedded default; no Ray import).
``ray``: the roles as Ray actors, colocated or disaggregated (``rlxf.placement.ray``).
"""

from __future__ import annotations

from rlxf.config import Config
from rlxf.errors import MissingExtraError
from rlxf.placement.base import LearnerLost, Placement
from rlxf.run_dir import RunDir


def build(cfg: Config, **objects) -> Placement:
    """The placement ``run.placement`` names, built for ``cfg`` (models loaded, engine ready).

    ``objects``: in-memory ``model``, ``tokenizer`` and ``reward`` to use instead of building
    them from the config (the Python API, ``rlxf.train``); ``None`` values mean "build it from
    the config" and are allowed in every placement.
    """
    if cfg.run.placement == "local":
        from rlxf.placement.local import LocalPlacement

        return LocalPlacement.from_config(cfg, **objects)
    if any(v is not None for v in objects.values()):
        raise ValueError("in-memory models, tokenizers and rewards run only in the local placement "
                         "(run.placement=local); a Ray placement loads them from the config in its actors")
    if cfg.run.placement == "ray":
        try:
            from rlxf.placement.ray import RayPlacement
        except ImportError as e:
            if (e.name or "").partition(".")[0] != "ray":   # a broken import of something else: as it is
                raise
            raise MissingExtraError(f"run.placement=ray needs Ray: pip install 'rlxf[ray]' ({e})") from None
        return RayPlacement(cfg)
    raise ValueError(f"unknown run.placement {cfg.run.placement!r}; valid: local, ray")


def run_training(cfg: Config, run: RunDir, *, resume: bool = False, **objects) -> dict[str, float]:
    """Build the configured placement, run the RL loop in it, close it; the last step's metrics.
    ``objects``: in-memory model / tokenizer / reward (see ``build``)."""
    import torch

    from rlxf.trainer.checkpoint import latest_checkpoint
    from rlxf.trainer.loop import train

    torch.manual_seed(cfg.seeds.init)  # model initialisation (a value head)
    try:
        with build(cfg, **objects) as placement:
            return train(cfg, run, placement, resume=resume)
    except LearnerLost as e:
        last = latest_checkpoint(run.checkpoints)
        where = f"the last checkpoint is {last}" if last else "there is no checkpoint yet (it restarts from step 0)"
        raise LearnerLost(f"{e} In {run.path}, {where}.") from e


__all__ = ["LearnerLost", "Placement", "build", "run_training"]
