"""rlxf's native rollout engine (Llama / Qwen2 decoders): see ``rlxf.rollout.native.engine``."""

from rlxf.rollout.native.engine import NativeEngine
from rlxf.rollout.native.model import UnsupportedModel, model_spec

__all__ = ["NativeEngine", "UnsupportedModel", "model_spec"]
