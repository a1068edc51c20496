"""How the policy generates responses."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from rlxf.config.base import Section
from rlxf.config.run import MAX_SEED


class RolloutConfig(Section):
    mode: Literal["sync", "async"] = Field(
        "sync",
        description="`sync`: each step samples from the weights the previous step produced, then trains "
        "(rollout and training take turns). `async`: the engine runs in its own process and keeps "
        "generating while the trainer trains, up to `max_staleness` policy versions ahead "
        "(see docs/async.md).",
    )
    max_staleness: int = Field(
        0, ge=0,
        description="Async mode: a group may be trained on only if the weights that sampled its oldest "
        "token are at most this many versions behind the trainer (version = steps trained); older groups "
        "are dropped and counted (`async/dropped_stale`). 0 = no overlap: the same numbers as `sync`.",
    )
    backend: Literal["native", "hf"] = Field(
        "native",
        description="`native`: rlxf's engine (KV cache, prefix sharing, continuous batching; "
        "Llama/Qwen2 families; other models fall back to `hf` with a notice). "
        "`hf`: transformers.generate, the reference.",
    )
    n: int = Field(8, ge=1, description="Samples per prompt (the group size G in GRPO).")
    temperature: float = Field(
        0.7, ge=0.0, allow_inf_nan=False,
        description="Sampling temperature; 0 = greedy. 0.7 by default: on benchmarks/efficacy.py's six "
        "untuned tasks, on one seed, it learned 10 points or more on 4 in 5 minutes where 1.0 learned "
        "3, with a constant lr (a second seed fell short at both; with the cosine lr schedule, the default "
        "since, 4 of 6 on three of four seeds: benchmarks/README.md); the recipes and examples set 1.0, "
        "the usual RL setting for a real model. A finite number: 0, or at least 1e-6 (smaller "
        "nonzero values overflow logits / temperature and are refused; use 0 for greedy). Engine "
        "log-probs are those of softmax(logits / temperature), before top-k / top-p truncation.",
    )
    top_p: float = Field(1.0, gt=0.0, le=1.0, allow_inf_nan=False,
                         description="Nucleus sampling mass, in (0, 1]; 1 = off.")

    @field_validator("temperature")
    @classmethod
    def _temperature_not_tiny(cls, v: float) -> float:
        from rlxf.rollout.sampling import MIN_TEMPERATURE

        if 0.0 < v < MIN_TEMPERATURE:
            raise ValueError(f"temperature must be 0 (greedy) or >= {MIN_TEMPERATURE:g}; smaller ones overflow "
                             f"logits / temperature (got {v}); use 0 for greedy decoding")
        return v
    top_k: int = Field(0, ge=0, description="Sample among the k most likely tokens; 0 = off.")
    max_new_tokens: int = Field(128, ge=1, description="Longest response in tokens (with an environment: longest model turn).")
    stop_strings: list[str] = Field(
        default_factory=list,
        description="Stop a response once its decoded text contains one of these strings "
        "(the token that completes it is kept).",
    )
    stop_token_ids: list[Annotated[int, Field(ge=0)]] = Field(
        default_factory=list,
        description="Extra token ids that end a response, besides the model's eos ids.",
    )
    ignore_eos: bool = Field(
        False, description="Do not stop at the model's eos ids (only at stop_token_ids / stop_strings / length)."
    )
    seed: int | None = Field(
        None, ge=0, le=MAX_SEED,
        description="The sampling seed: every rollout and evaluation request's seed is derived from "
        "it and the step (so steps differ and runs repeat); vary it alone to repeat a run over "
        "sampling seeds on the same data (run.data_seed). None = run.seed.",
    )
    max_batch_size: int = Field(
        512, ge=1, description="Native engine: most sequences decoded at once (KV-cache rows)."
    )
    threads: int | None = Field(
        None, ge=1,
        description="Native engine on CPU: decode workers, each a thread with its own batch and one "
        "intra-op thread; None = torch's thread count.",
    )
    max_model_len: int | None = Field(
        None, ge=2,
        description="Context window (prompt + response tokens); None = the model's max_position_embeddings (no limit for a model without one, e.g. Bloom).",
    )
    max_prefill_tokens: int = Field(
        8192, ge=1, description="Native engine: most (padded) prompt tokens in one prefill forward."
    )
    pack_weights: Literal["auto", "on", "off"] = Field(
        "auto",
        description="Native engine on CPU: keep the weights in oneDNN's blocked layout instead of "
        "reordering them inside every decode matmul (20-25% faster matmuls at decode's few rows, "
        "bit-identical results, one more copy of the weights in memory). `auto`: on when that copy "
        "is at most 64 MiB.",
    )
    compile: bool = Field(
        False,
        description="Native engine: torch.compile the decode step. For CUDA; on CPU it is slower than "
        "the default oneDNN path (and compiling takes minutes).",
    )
