"""How the policy generates responses."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from rlxf.config.base import Section


class RolloutConfig(Section):
    backend: Literal["native", "hf"] = Field(
        "native",
        description="`native`: rlxf's engine (KV cache, prefix sharing, continuous batching; "
        "Llama/Qwen2 families). `hf`: transformers.generate, the reference.",
    )
    n: int = Field(8, ge=1, description="Samples per prompt (the group size G in GRPO).")
    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature; 0 = greedy.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass; 1 = off.")
    top_k: int = Field(0, ge=0, description="Sample among the k most likely tokens; 0 = off.")
    max_new_tokens: int = Field(128, ge=1, description="Longest response in tokens.")
    stop_strings: list[str] = Field(
        default_factory=list, description="Stop a response when it ends with one of these strings."
    )
    max_batch_size: int = Field(
        512, ge=1, description="Native engine: most sequences decoded at once (KV-cache slots)."
    )
    compile: bool = Field(False, description="Native engine: torch.compile the decode step.")
