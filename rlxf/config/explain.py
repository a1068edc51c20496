"""The algorithm summary, batch arithmetic and memory estimate behind ``rlxf explain``.

Memory figures are rough upper bounds (no allocator overhead, no fragmentation), meant to
tell a user which knob to turn before a run goes out of memory, not to be exact.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rlxf.config.algorithm import AlgorithmConfig
from rlxf.config.schema import Config

GiB = 1024**3
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class ModelDims:
    """What the memory estimate needs to know about a decoder-only transformer."""

    params: int
    layers: int
    hidden: int
    intermediate: int
    kv_dim: int        # num_key_value_heads * head_dim
    vocab: int

    @classmethod
    def from_hf_config(cls, hf_config, params: int) -> ModelDims:
        heads = hf_config.num_attention_heads
        head_dim = getattr(hf_config, "head_dim", None) or hf_config.hidden_size // heads
        kv_heads = getattr(hf_config, "num_key_value_heads", None) or heads
        return cls(params=params, layers=hf_config.num_hidden_layers, hidden=hf_config.hidden_size,
                   intermediate=getattr(hf_config, "intermediate_size", 4 * hf_config.hidden_size),
                   kv_dim=kv_heads * head_dim, vocab=hf_config.vocab_size)


@dataclass(frozen=True)
class RoleMemory:
    role: str
    weights: int
    grads: int = 0
    optimizer: int = 0
    activations: int = 0
    kv_cache: int = 0

    @property
    def total(self) -> int:
        return self.weights + self.grads + self.optimizer + self.activations + self.kv_cache


def on_cuda(cfg: Config) -> bool:
    """Whether the model would train on CUDA here: ``model.device=cuda``, or ``auto`` on a machine
    that has CUDA (``rlxf.models.loading.resolve_device``), so that ``rlxf explain`` describes the
    run ``rlxf train`` would start on this machine."""
    if cfg.model.device != "auto":
        return cfg.model.device == "cuda"
    import torch  # noqa: PLC0415 - config stays importable without torch until it is asked about devices

    return torch.cuda.is_available()


def resolved_dtype(cfg: Config, cuda: bool | None = None) -> str:
    """The dtype the model is loaded in: ``model.dtype``, or for ``auto`` bfloat16 on CUDA and
    float32 on CPU. ``cuda`` None: as this machine would run the config (:func:`on_cuda`)."""
    if cfg.model.dtype != "auto":
        return cfg.model.dtype
    return "bfloat16" if (on_cuda(cfg) if cuda is None else cuda) else "float32"


def activation_bytes(dims: ModelDims, tokens: int, dtype_bytes: int, checkpointing: bool, chunk: int) -> int:
    """Saved activations of one forward+backward over ``tokens`` tokens.

    Per layer and token a Llama-style block keeps roughly its input, q/k/v and attention output
    (hidden + 2 kv_dim + 2 hidden) and the MLP's gate/up/activation/input (3 intermediate + hidden):
    about 4h + 2kv + 3I values. With gradient checkpointing only each layer's input is kept, plus
    one layer recomputed at a time. The log-prob head holds one chunk of (tokens x vocab) float32
    logits at a time (and its softmax for the backward).
    """
    per_layer = 4 * dims.hidden + 2 * dims.kv_dim + 3 * dims.intermediate
    if checkpointing:
        body = tokens * (dims.layers * dims.hidden + per_layer) * dtype_bytes
    else:
        body = tokens * dims.layers * per_layer * dtype_bytes
    head = 2 * min(tokens, chunk) * dims.vocab * 4
    return body + head


def memory_estimate(cfg: Config, dims: ModelDims) -> list[RoleMemory]:
    """Bytes per role for this config: actor, reference (if kl_coef > 0), critic (if the
    advantage estimator needs values), engine."""
    from rlxf.algorithms import registry  # noqa: PLC0415 - the registries sit below config (they import torch)

    b = DTYPE_BYTES[resolved_dtype(cfg)]
    d = cfg.derived
    micro_tokens = d.micro_batch_size * d.max_tokens_per_sample
    act = activation_bytes(dims, micro_tokens, b, cfg.model.gradient_checkpointing, cfg.model.logprob_chunk_size)
    trainable = dims.params
    roles = [RoleMemory("actor", weights=dims.params * b, grads=trainable * b,
                        optimizer=2 * trainable * 4, activations=act)]
    if cfg.algorithm.kl_coef > 0:
        roles.append(RoleMemory("reference", weights=dims.params * b,
                                activations=2 * min(micro_tokens, cfg.model.logprob_chunk_size) * dims.vocab * 4))
    if registry.needs("advantage", cfg.algorithm.advantage).values:
        critic_act = act - 2 * min(micro_tokens, cfg.model.logprob_chunk_size) * dims.vocab * 4
        roles.append(RoleMemory("critic", weights=dims.params * b, grads=trainable * b,
                                optimizer=2 * trainable * 4, activations=critic_act))
    slots = min(cfg.rollout.max_batch_size, d.samples_per_step)
    kv = slots * d.max_tokens_per_sample * dims.layers * 2 * dims.kv_dim * b
    roles.append(RoleMemory("engine", weights=dims.params * b, kv_cache=kv))
    return roles


def batch_table(cfg: Config) -> list[tuple[str, str, str]]:
    """(quantity, value, how it is computed) rows of the batch arithmetic."""
    d = cfg.derived
    t = cfg.train
    micro_from = "train.micro_batch_size"
    if d.micro_batch_size < t.micro_batch_size:
        micro_from = f"train.micro_batch_size={t.micro_batch_size}, capped at the mini-batch"
    return [
        ("prompts per step", f"{t.prompts_per_step}", "train.prompts_per_step"),
        ("samples per step", f"{d.samples_per_step}", f"prompts x rollout.n = {t.prompts_per_step} x {cfg.rollout.n}"),
        ("mini-batch (samples per optimizer step)", f"{d.mini_batch_size}",
         "train.mini_batch_size" if t.mini_batch_size else "all samples of the step"),
        ("micro-batch (samples per forward/backward)", f"{d.micro_batch_size}", micro_from),
        ("gradient-accumulation steps", f"{d.grad_accum_steps}", f"mini / micro = {d.mini_batch_size} / {d.micro_batch_size}"),
        ("micro-batches per RL step", f"{d.micro_batches_per_step}",
         f"samples / micro x epochs = {d.samples_per_step} / {d.micro_batch_size} x {t.ppo_epochs}"),
        ("optimizer steps per RL step", f"{d.optimizer_steps_per_step}",
         f"samples / mini x epochs = {d.samples_per_step} / {d.mini_batch_size} x {t.ppo_epochs}"),
        ("optimizer steps in the run", f"{d.optimizer_steps_per_step * t.steps}", f"x train.steps = {t.steps}"),
        ("tokens per sample (upper bound)", f"{d.max_tokens_per_sample}",
         f"data.max_prompt_len + rollout.max_new_tokens = {cfg.data.max_prompt_len} + {cfg.rollout.max_new_tokens}"),
        ("tokens per step (upper bound)", f"{d.max_tokens_per_step:,}", "samples x tokens per sample"),
        ("prompts in the run", f"{t.prompts_per_step * t.steps:,}", "prompts per step x train.steps"),
        _schedule_row(cfg),
    ]


def _schedule_row(cfg: Config) -> tuple[str, str, str]:
    """The actor's lr schedule, and what it runs over (the steps, or the time budget first)."""
    o, t = cfg.train.optim, cfg.train
    warmup = f"{o.warmup_steps} warm-up steps, then " if o.warmup_steps else ""
    if o.schedule == "constant":
        return "actor lr schedule", "constant", f"{warmup}train.optim.schedule"
    over = f"{warmup}down to {o.min_lr_ratio:g} x lr over the {cfg.derived.actor_optimizer_steps:,} optimizer steps"
    if t.max_seconds is not None:
        over += f", or train.max_seconds={t.max_seconds:g} where that ends first"
    return "actor lr schedule", "cosine", over


def _summary(kind: str, name: str) -> str:
    """The first paragraph of a registered function's docstring, without its shapes."""
    from rlxf.algorithms import registry  # noqa: PLC0415 - the registries sit below config (they import torch)

    doc = (registry.get(kind, name).__doc__ or "").strip().split("\n\n")[0]
    return re.sub(r"\s*\(B, T\) -> \([^)]*\)\.?$", "", " ".join(doc.split()))


LEVELS = {"token": "per token", "sequence": "per sequence (product over its tokens)",
          "geometric": "per sequence (geometric mean over its tokens)"}


def off_policy_summary(algo: AlgorithmConfig) -> str:
    """The weight the off-policy correction puts on each token's loss, with the config's bounds."""
    cap, name = algo.is_cap, algo.off_policy
    if name == "none":
        return "none: w = 1 (the engine is taken to sample from π_old)"
    weight = {
        "tis": f"w = min(ρ, {cap:g})" if cap is not None else "",
        "mis": (f"w = ρ if {algo.is_floor if algo.is_floor is not None else 1 / cap:g} <= ρ <= {cap:g}, else 0"
                if cap is not None else ""),
        "decoupled": f"w = ρ, 0 where ρ > {cap:g}" if cap is not None else "w = ρ (no cap)",
    }.get(name, f"is_cap {cap}, is_floor {algo.is_floor}")
    return f"{name}: {weight}; ρ = π_old / π_rollout {LEVELS[algo.is_level]}"


def algorithm_table(cfg: Config) -> list[tuple[str, str, str]]:
    """(part, choice, what it is) rows of the algorithm the config trains with."""
    a = cfg.algorithm
    if a.kl_coef == 0:
        kl = ("off", "no reference model is loaded")
    else:
        where = "added to the loss" if a.kl_mode == "loss" else "subtracted from each token's reward"
        kl = (f"{a.kl_estimator}, β = {a.kl_coef:g}", f"β · KL(π_θ ‖ π_ref), {where}")
    return [
        ("advantage", a.advantage, _summary("advantage", a.advantage)),
        ("policy loss", a.policy_loss, _summary("policy_loss", a.policy_loss)),
        ("loss aggregation", a.loss_agg, _summary("loss_agg", a.loss_agg)),
        ("KL to the reference", *kl),
        ("off-policy correction", off_policy_summary(a), _summary("off_policy", a.off_policy)),
    ]


def mixture_table(cfg: Config) -> list[tuple[str, str, str, str]]:
    """(source, weight, prompts per step, verifiers) of a data mixture; [] for one source.

    Prompts per step is the source's share of ``train.prompts_per_step`` (each batch holds it to
    within one prompt). Held-out prompts removed from training are counted when the data are
    built (the ``prompt data`` line of the run's log: ``<source>/train_removed_held_out``).
    """
    data = cfg.data
    if not data.mixture:
        return []
    total = sum(s.weight for s in data.sources)
    rows = []
    for s in data.sources:
        what = s.task if s.source == "task" else f"{s.source} {s.train_path}"
        verifiers = ", ".join(v.label for v in (s.verifiers or cfg.reward.verifiers))
        share = f"{cfg.train.prompts_per_step * s.weight / total:.1f}" if s.weight else "0 (evaluated only)"
        rows.append((f"{s.label} ({what})", f"{s.weight:g}", share,
                     verifiers + ("" if s.verifiers else " (reward.verifiers)")))
    return rows


def placement_table(cfg: Config, roles: list[RoleMemory]) -> list[tuple[str, str, str, int | None]]:
    """(process, roles it holds, CPUs / GPUs, estimated bytes or None) for ``run.placement``.

    With ``ray.learners`` = N, one row per learner rank. Under FSDP a rank holds 1/N of the
    actor's weights, gradients and optimizer moments (plus its own activations; the layer being
    computed is gathered in full for a moment, not counted); under DDP each holds all of them.
    """
    mem = {r.role: r.total for r in roles}
    trainer = [r.role for r in roles if r.role != "engine"]
    if cfg.run.placement == "local" and cfg.rollout.mode == "async":
        return [("this process", ", ".join([*trainer, "reward"]), "run.threads torch threads",
                 sum(mem[r] for r in trainer)),
                (f"engine process (async, max_staleness={cfg.rollout.max_staleness})",
                 "engine (own copy of the policy, weights through shared memory)", "1 core", mem["engine"])]
    if cfg.run.placement == "local":
        return [("this process", ", ".join([*trainer, "engine", "reward"]), "all of this machine's",
                 sum(mem.values()))]
    rc = cfg.ray
    learner = f"{rc.learner_cpus:g} CPU" + (f", {rc.learner_gpus:g} GPU" if rc.learner_gpus else "")
    per_rank = sum(mem[r] for r in trainer)
    if rc.learners > 1 and rc.learner_strategy == "fsdp":
        actor = next(r for r in roles if r.role == "actor")
        per_rank -= (actor.weights + actor.grads + actor.optimizer) * (rc.learners - 1) // rc.learners
    ranks = [f" rank {i}" if rc.learners > 1 else "" for i in range(rc.learners)]
    if rc.mode == "colocated":
        rows = [(f"Ray actor: colocated{ranks[0]}", ", ".join([*trainer, "engine", "reward"]), learner,
                 per_rank + mem["engine"])]
        first = 1
    else:
        rows = []
        first = 0
    rows += [(f"Ray actor: learner{ranks[i]}", ", ".join(trainer), learner, per_rank)
             for i in range(first, rc.learners)]
    if rc.mode == "colocated":
        return rows
    engine = f"{rc.engine_cpus:g} CPU" + (f", {rc.engine_gpus:g} GPU" if rc.engine_gpus else "")
    rows += [(f"Ray actor: engine {i}", "engine (own copy of the policy)", engine, mem["engine"])
             for i in range(rc.engines)]
    rows += [(f"Ray actor: reward {i}", "reward (the verifiers, own verifier pool)", f"{rc.reward_cpus:g} CPU", None)
             for i in range(rc.reward_actors)]
    rows.append(("driver (rlxf train)", "data" if rc.reward_actors else "data, reward (verifier pool)", "-", None))
    return rows


def offload_note(cfg: Config) -> list[str]:
    """Where the optimizer state waits between updates (``train.offload_optimizer``)."""
    on_gpu = (on_cuda(cfg) if cfg.run.placement == "local" else cfg.model.device == "cuda") or (
        cfg.run.placement == "ray" and cfg.ray.learner_gpus > 0)
    mode = cfg.train.offload_optimizer
    if mode == "off" or (mode == "auto" and not on_gpu):
        return []
    where = "a GPU" if on_gpu else "CPU, where nothing moves"
    return [f"optimizer state: in pinned host memory between updates, back on the device for each update "
            f"(train.offload_optimizer={mode}; the actor is on {where})"]


def placement_notes(cfg: Config) -> list[str]:
    """How the Ray placement's learners train together and how weights reach the engines, and
    where the optimizer state waits between updates."""
    notes = offload_note(cfg)
    if cfg.run.placement == "local":
        return notes
    rc = cfg.ray
    if rc.learners > 1:
        backend = rc.learner_backend.upper() if rc.learner_backend == "nccl" else rc.learner_backend
        how = ("FSDP2: weights, gradients and optimizer state sharded over the ranks" if rc.learner_strategy == "fsdp"
               else "DDP: a full replica per rank, gradients summed by all-reduce")
        notes.append(f"learners: {rc.learners} ranks over {backend}; {how}; each takes 1/{rc.learners} of every "
                     f"mini-batch; rank 0 writes checkpoints (those of one learner)")
    else:
        notes.append("learners: 1 (ray.learners)")
    if rc.mode == "colocated":
        notes.append("weight sync: in process (the engine copies the learner's weights in its own actor)")
    elif rc.weight_sync == "collective":
        backend = "NCCL, GPU to GPU" if rc.sync_backend == "nccl" else "gloo"
        notes.append(f"weight sync: learner rank 0 broadcasts to the {rc.engines} engine(s) ({backend}) after each step")
    else:
        notes.append(f"weight sync: learner rank 0 puts the weights in Ray's object store once; each of the "
                     f"{rc.engines} engine(s) fetches them after each step")
    return notes


def _changed(section, name: str) -> bool:
    """Whether ``section.name`` differs from the field's default (a config.yaml a run wrote holds
    every field, so being written down does not mean being chosen)."""
    return getattr(section, name) != type(section).model_fields[name].get_default(call_default_factory=True)


def _shown(value) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _reads(kind: str, name: str, reader: tuple[str, ...]) -> bool:
    """Whether the registered ``name`` may read a parameter that only the built-ins ``reader`` read:
    one of them, or a function of the user's own (what it reads is not known)."""
    from rlxf.algorithms import registry  # noqa: PLC0415 - the registries sit below config (they import torch)

    return name in reader or not registry.get(kind, name).__module__.startswith("rlxf.")


def _unused_algorithm_settings(cfg: Config) -> list[str]:
    """Algorithm and critic fields that the chosen advantage, loss, aggregation and switches never read."""
    from rlxf.algorithms import registry  # noqa: PLC0415

    a = cfg.algorithm
    unread: list[tuple[tuple[str, ...], str]] = []   # (fields, why they are not read)
    if a.kl_coef == 0:
        unread.append((("kl_estimator", "kl_mode", "kl_horizon"), "algorithm.kl_coef is 0 (no KL term)"))
    elif a.kl_target is None:
        unread.append((("kl_horizon",), "algorithm.kl_target is not set (β stays algorithm.kl_coef)"))
    if not registry.needs("advantage", a.advantage).values:
        unread.append((("value_clip",), f"algorithm.advantage={a.advantage!r} trains no critic"))
    if not _reads("advantage", a.advantage, ("gae",)):
        unread.append((("gae_lambda",), f"algorithm.advantage={a.advantage!r} is not GAE"))
    if not _reads("advantage", a.advantage, ("gae", "grpo")):
        unread.append((("norm_adv_by_std",), f"algorithm.advantage={a.advantage!r} does not read it "
                                             "(gae and grpo do)"))
    if not _reads("policy_loss", a.policy_loss, ("dual_clip",)):
        unread.append((("dual_clip_c",), f"algorithm.policy_loss={a.policy_loss!r} is not dual_clip"))
    if not _reads("policy_loss", a.policy_loss, ("cispo",)):
        unread.append((("cispo_eps_high",), f"algorithm.policy_loss={a.policy_loss!r} is not cispo"))
    if not _reads("loss_agg", a.loss_agg, ("seq_mean_token_sum_norm",)):
        unread.append((("loss_agg_norm",), f"algorithm.loss_agg={a.loss_agg!r} is not seq_mean_token_sum_norm"))
    if a.off_policy == "none":
        unread.append((("is_level",), "algorithm.off_policy is none"))
    if not a.dynamic_sampling:
        unread.append((("max_sampling_rounds",), "algorithm.dynamic_sampling is off"))
    if a.overlong_buffer == 0:
        unread.append((("overlong_penalty",), "algorithm.overlong_buffer is 0 (no overlong penalty)"))
    notes = [f"algorithm.{name}={_shown(getattr(a, name))} does nothing: {why}"
             for names, why in unread for name in names if _changed(a, name)]
    if not registry.needs("advantage", a.advantage).values:
        notes += [f"critic.{name} is set, and algorithm.advantage={a.advantage!r} trains no critic: it does nothing"
                  for name in ("path", "optim") if _changed(cfg.critic, name)]
    return notes


def unused_settings(cfg: Config) -> list[str]:
    """Fields set to a value the rest of the config never reads: valid, so loading accepts them,
    but likely a mistake (the run behaves as if they were unset)."""
    notes = _unused_algorithm_settings(cfg)
    if (note := cfg.data.ignored_source_fields()) is not None:
        notes.append(note)
    if cfg.rollout.mode != "async" and cfg.rollout.max_staleness > 0:
        notes.append(f"rollout.max_staleness={cfg.rollout.max_staleness} does nothing under rollout.mode="
                     f"{cfg.rollout.mode}: each step samples from the weights the previous step produced. "
                     f"Set rollout.mode=async to let generation run ahead of training")
    return notes
