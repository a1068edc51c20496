"""`rlxf explain` arithmetic against hand-computed values."""

from __future__ import annotations

from rlxf.config import load_config
from rlxf.config.explain import ModelDims, activation_bytes, algorithm_table, batch_table, memory_estimate


def _cfg(*overrides):
    base = {"model": {"path": "m"}, "data": {"task": "arithmetic", "max_prompt_len": 32},
            "rollout": {"n": 8, "max_new_tokens": 96, "max_batch_size": 64},
            "train": {"prompts_per_step": 16, "mini_batch_size": 64, "micro_batch_size": 16}}
    return load_config(None, list(overrides), base=base)


def test_batch_table_rows():
    cfg = _cfg("train.ppo_epochs=2")
    rows = {q: v for q, v, _ in batch_table(cfg)}
    assert rows["samples per step"] == "128"                 # 16 x 8
    assert rows["gradient-accumulation steps"] == "4"        # 64 / 16
    assert rows["optimizer steps per RL step"] == "4"        # 128 / 64 x 2
    assert rows["micro-batches per RL step"] == "16"         # 128 / 16 x 2
    assert rows["tokens per sample (upper bound)"] == "128"  # 32 + 96
    assert rows["tokens per step (upper bound)"] == "16,384"  # 128 x 128


def test_the_schedule_row_says_what_the_lr_decays_over():
    rows = {q: (v, how) for q, v, how in batch_table(_cfg("train.steps=10", "train.ppo_epochs=2"))}
    assert rows["actor lr schedule"] == ("cosine", "down to 0.1 x lr over the 40 optimizer steps")  # 10 x 4
    timed = {q: (v, how) for q, v, how in batch_table(_cfg("train.steps=10", "train.max_seconds=300",
                                                           "train.optim.warmup_steps=5"))}
    assert timed["actor lr schedule"] == (
        "cosine", "5 warm-up steps, then down to 0.1 x lr over the 20 optimizer steps, or train.max_seconds=300 "
        "where that ends first")
    flat = {q: (v, how) for q, v, how in batch_table(_cfg("train.optim.schedule=constant"))}
    assert flat["actor lr schedule"] == ("constant", "train.optim.schedule")


DIMS = ModelDims(params=1_000_000, layers=2, hidden=64, intermediate=256, kv_dim=32, vocab=1000)


def test_activation_bytes_by_hand():
    # per layer per token: 4*64 + 2*32 + 3*256 = 256 + 64 + 768 = 1088 values
    # 10 tokens, 2 layers, fp32: 10 * 2 * 1088 * 4 = 87,040 bytes
    # head: 2 * min(10, 4) * 1000 * 4 = 32,000 bytes
    assert activation_bytes(DIMS, tokens=10, dtype_bytes=4, checkpointing=False, chunk=4) == 87_040 + 32_000
    # checkpointing: 10 * (2 * 64 + 1088) * 4 = 48,640 bytes, plus the same head
    assert activation_bytes(DIMS, tokens=10, dtype_bytes=4, checkpointing=True, chunk=4) == 48_640 + 32_000


def test_memory_per_role_by_hand():
    cfg = _cfg("algorithm.kl_coef=0.1")
    roles = {r.role: r for r in memory_estimate(cfg, DIMS)}
    assert set(roles) == {"actor", "reference", "engine"}      # no critic for GRPO
    actor = roles["actor"]
    assert actor.weights == 4_000_000                          # 1M params x 4 bytes (fp32 on CPU)
    assert actor.grads == 4_000_000
    assert actor.optimizer == 8_000_000                        # AdamW: two fp32 moments
    # engine KV cache: 64 slots x 128 tokens x 2 layers x 2 (k, v) x 32 x 4 bytes = 4,194,304
    assert roles["engine"].kv_cache == 4_194_304
    ppo = {r.role for r in memory_estimate(_cfg("algorithm.name=ppo"), DIMS)}
    assert ppo == {"actor", "critic", "engine"}                # kl_coef 0: no reference


def test_batch_table_says_when_the_micro_batch_is_capped():
    cfg = _cfg("train.prompts_per_step=4", "rollout.n=4", "train.mini_batch_size=null",
               "train.micro_batch_size=64")
    rows = {q: (v, how) for q, v, how in batch_table(cfg)}
    value, how = rows["micro-batch (samples per forward/backward)"]
    assert value == "16" and "train.micro_batch_size=64, capped at the mini-batch" in how
    assert rows["gradient-accumulation steps"][0] == "1"
    plain = {q: how for q, _, how in batch_table(_cfg())}
    assert plain["micro-batch (samples per forward/backward)"] == "train.micro_batch_size"


def test_algorithm_table_names_the_off_policy_correction_and_its_bounds():
    rows = {part: (choice, what) for part, choice, what in algorithm_table(_cfg())}
    assert rows["off-policy correction"][0] == "none: w = 1 (the engine is taken to sample from π_old)"
    assert rows["policy loss"] == ("ppo_clip", "PPO clipped surrogate (Schulman et al. 2017) with decoupled "
                                               "bounds (DAPO, Yu et al. 2025).")

    def correction(*overrides):
        return {p: c for p, c, _ in algorithm_table(_cfg(*overrides))}["off-policy correction"]

    assert correction("algorithm.off_policy=tis") == "tis: w = min(ρ, 2); ρ = π_old / π_rollout per token"
    # mis: the floor defaults to 1 / cap = 1 / 4
    assert correction("algorithm.off_policy=mis", "algorithm.is_cap=4", "algorithm.is_level=sequence") == (
        "mis: w = ρ if 0.25 <= ρ <= 4, else 0; ρ = π_old / π_rollout per sequence (product over its tokens)")
    assert correction("algorithm.off_policy=decoupled").startswith("decoupled: w = ρ (no cap)")
    assert correction("algorithm.off_policy=decoupled", "algorithm.is_cap=5").startswith(
        "decoupled: w = ρ, 0 where ρ > 5;")
