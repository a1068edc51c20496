"""Rollout backends by name. A backend's module is imported only when it is chosen.

Every backend is a class with one constructor signature, ``(model, tokenizer, options)``,
so the registry is a plain dict from name to "module:Class".
"""

from __future__ import annotations

import importlib
import logging

from rlxf.rollout.base import Engine, EngineOptions

log = logging.getLogger(__name__)

BACKENDS: dict[str, str] = {
    "native": "rlxf.rollout.native.engine:NativeEngine",
    "hf": "rlxf.rollout.hf:HFEngine",
}


def backend_class(name: str):
    if name not in BACKENDS:
        raise ValueError(f"unknown rollout backend {name!r}; valid backends: {', '.join(BACKENDS)}")
    module, cls = BACKENDS[name].split(":")
    return getattr(importlib.import_module(module), cls)


def build_engine(backend: str, model, tokenizer=None, options: EngineOptions | None = None, **kwargs) -> Engine:
    """An engine holding its own copy of ``model``'s weights.

    ``options`` or keyword arguments set ``EngineOptions`` fields (``max_batch_size=256``).
    ``native`` falls back to ``hf`` with a logged notice for a model it does not implement.
    """
    if kwargs:
        options = EngineOptions(**{**(options.__dict__ if options else {}), **kwargs})
    options = options or EngineOptions()
    if backend == "native":
        from rlxf.models.loading import unwrap_model
        from rlxf.rollout.native.model import UnsupportedModel, model_spec

        try:
            model_spec(unwrap_model(model), options.max_model_len)
        except UnsupportedModel as e:
            log.warning("rollout backend 'native' does not support this model (%s); using 'hf' instead", e)
            backend = "hf"
    return backend_class(backend)(model, tokenizer, options)


def build_engine_from_config(cfg, model, tokenizer=None, *, device=None, dtype=None, seed: int = 0) -> Engine:
    """From a ``rollout:`` config section (``rlxf.config.rollout.RolloutConfig``).

    The engine's generator is seeded with ``cfg.seed``, or ``seed`` (the run's seed) when that
    is None.
    """
    options = EngineOptions(
        max_batch_size=cfg.max_batch_size, threads=cfg.threads, max_model_len=cfg.max_model_len,
        max_prefill_tokens=cfg.max_prefill_tokens, compile=cfg.compile,
        seed=cfg.seed if cfg.seed is not None else seed, device=device, dtype=dtype,
        pack_weights={"auto": None, "on": True, "off": False}[cfg.pack_weights],
    )
    return build_engine(cfg.backend, model, tokenizer, options)
