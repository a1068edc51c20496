"""The trainer's roles: the actor (policy being trained), the reference, the critic.

Each is an object with a handful of methods the loop calls; a Ray placement can host the same
classes in actors without the loop changing. All work happens in micro-batches of
``micro_batch_size`` sequences, packed into one row each when ``packing`` is on.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from rlxf.algorithms import loss_totals, masked_sum, value_loss, zero_variance_fraction
from rlxf.algorithms.value import explained_variance
from rlxf.config.train import OptimConfig
from rlxf.errors import UserInputError
from rlxf.models.logprobs import LogprobOutput, causal_lm_parts, sequence_logprobs, wants_shared_prompts
from rlxf.models.value_model import sequence_values
from rlxf.trainer.distributed import SINGLE, DataParallel
from rlxf.trainer.objective import PolicyObjective, Totals
from rlxf.trainer.optim import any_nonzero_grad, build_optimizer
from rlxf.types import Experience

if TYPE_CHECKING:
    from rlxf.data import SFTExample


@dataclass(frozen=True)
class ForwardSpec:
    """How a role runs its model over a batch."""

    micro_batch_size: int
    packing: bool = True
    temperature: float = 1.0   # log-probs of softmax(logits / T), matching the sampler
    chunk_size: int = 1024     # tokens per log-softmax chunk


def micro_batches(n: int, size: int) -> Iterator[list[int]]:
    for start in range(0, n, size):
        yield list(range(start, min(n, start + size)))


def _pad_to(x: Tensor, width: int) -> Tensor:
    return x if x.shape[1] == width else torch.nn.functional.pad(x, (0, width - x.shape[1]))


def sharded_rows(forward, prompt_ids: list[list[int]], response_ids: list[list[int]], micro_batch_size: int,
                 dp: DataParallel) -> Tensor:
    """``forward(prompts, responses) -> (b, t)`` over every row, (B, T) right-padded with 0.

    Each rank runs its share of the rows in micro-batches (as many passes as every other rank,
    under FSDP) and the ranks' blocks are gathered, so every rank returns the whole batch.
    """
    width = max((len(r) for r in response_ids), default=0)
    mine = list(dp.share(len(response_ids)))
    out = []
    for idx in micro_batches(len(mine), micro_batch_size):
        rows = [mine[i] for i in idx]
        out.append(_pad_to(forward([prompt_ids[i] for i in rows], [response_ids[i] for i in rows]).float(), width))
    if dp.lockstep and response_ids:  # idle passes: the forward's all-gathers must pair up
        for _ in range(dp.passes(len(response_ids), micro_batch_size) - len(out)):
            forward(prompt_ids[:1], response_ids[:1])
    local = torch.cat(out) if out else torch.zeros(0, width)
    return dp.gather_rows(local, len(response_ids), width)


@torch.no_grad()
def batched_logprobs(model, prompt_ids: list[list[int]], response_ids: list[list[int]],
                     spec: ForwardSpec, dp: DataParallel = SINGLE) -> Tensor:
    """log π(a_t|s_t) for every response token, (B, T) right-padded with 0, without gradients."""
    def forward(prompts, responses):
        return sequence_logprobs(model, prompts, responses, temperature=spec.temperature,
                                 chunk_size=spec.chunk_size, packed=spec.packing).logprobs

    return sharded_rows(forward, prompt_ids, response_ids, spec.micro_batch_size, dp)


def nll_shares(logprobs: Callable[[list[list[int]], list[list[int]]], LogprobOutput], batch: Sequence[SFTExample],
               micro_batch_size: int, tokens: int, seen: list[float]) -> Iterator[Tensor]:
    """Each micro-batch's summed NLL of its demonstrations' response tokens over the batch's
    ``tokens`` (its share of the token mean, so the shares' gradients sum to the mean's); the
    values go to ``seen`` for the loss metric. SFT's loss, and PPO-ptx's supervised term.
    ``logprobs(prompts, responses)`` is the model's ``sequence_logprobs`` (through FSDP's root)."""
    for idx in micro_batches(len(batch), micro_batch_size):
        mb = [batch[i] for i in idx]
        out = logprobs([e.prompt_ids for e in mb], [e.response_ids for e in mb])
        nll = -masked_sum(out.logprobs, out.mask) / tokens
        seen.append(float(nll.detach()))
        yield nll


class _Accumulator:
    """Combines per-micro-batch metric shares into per-step values (see PolicyObjective)."""

    def __init__(self, dp: DataParallel = SINGLE) -> None:
        self.dp = dp
        self.mini: dict[str, Tensor] = {}
        self.step: dict[str, list[float]] = {}

    def add(self, metrics: dict[str, Tensor]) -> None:
        for k, v in metrics.items():
            v = v.detach().float()
            if k not in self.mini:
                self.mini[k] = v
            elif k.endswith("_max"):
                self.mini[k] = torch.maximum(self.mini[k], v)
            elif k.endswith("_min"):
                self.mini[k] = torch.minimum(self.mini[k], v)
            else:
                self.mini[k] = self.mini[k] + v

    def end_mini_batch(self, extra: dict[str, float]) -> None:
        """Close a mini-batch: its shares from every rank are combined; ``extra`` is global already."""
        mini = self.dp.combine_metrics({k: float(v) for k, v in self.mini.items()})
        for k, v in [*mini.items(), *extra.items()]:
            self.step.setdefault(k, []).append(v)
        self.mini = {}

    def result(self) -> dict[str, float]:
        out = {}
        for k, vs in self.step.items():
            if k.endswith("_max"):
                out[k] = max(vs)
            elif k.endswith("_min"):
                out[k] = min(vs)
            elif k == "skipped" or k.endswith("/skipped"):
                out[k] = sum(vs)
            else:
                out[k] = sum(vs) / len(vs)
        return out


def disable_dropout(model: torch.nn.Module) -> torch.nn.Module:
    """Zero the dropout of ``model``'s architecture, in place (its config and files are left as
    they are); returns ``model``.

    RL and preference training compare a model with itself: π_θ with π_old (PPO's ratio, 1 on
    the first mini-batch), π_θ with π_ref (DPO's h, 0 at the start), V with V_old (value
    clipping). Dropout in the training forward makes those comparisons noise: with attention
    dropout 0.3 the first mini-batch's ratios spread over 0.89-1.14, against a clip range of
    0.2, before any weight has moved. TRL trains such roles without dropout too (its
    ``disable_dropout``). Covers ``nn.Dropout`` modules, the float probabilities that
    transformers' modules hold (``attention_dropout``, GPT-2's ``attn_pdrop``, OPT's
    ``layerdrop``, which skips whole layers at random, ``drop_path``), and those a module reads
    from its ``config`` at call time (Falcon's and Persimmon's ``self.config.attention_dropout``):
    such a module gets a view of its config that reads them as 0 (``dropout_free_view``), while
    each top-level transformers model keeps its own config object, the one ``save_pretrained``
    writes; every other field of the view is that config's, so a later change to it
    (``output_hidden_states``, ``set_attn_implementation``) reaches every module. LoRA's
    ``lora_dropout``, which the user sets for the adapters, is kept.
    """
    from transformers import PretrainedConfig, PreTrainedModel

    def random_drop(name: str, value) -> bool:
        return type(value) is float and value != 0.0 and any(
            key in name for key in ("dropout", "pdrop", "layerdrop", "drop_path"))

    def top_models(module: torch.nn.Module) -> Iterator[torch.nn.Module]:
        if isinstance(module, PreTrainedModel):
            yield module
        else:
            for child in module.children():
                yield from top_models(child)

    saved = {id(m) for m in top_models(model)}
    views: dict[int, PretrainedConfig] = {}  # one view per config object, shared as the original was
    for name, module in model.named_modules():
        if "lora_dropout" in name:
            continue
        if isinstance(module, torch.nn.modules.dropout._DropoutNd):
            module.p = 0.0
        for attr, value in list(vars(module).items()):
            if random_drop(attr, value):
                setattr(module, attr, 0.0)
        config = vars(module).get("config")
        if id(module) in saved or not isinstance(config, PretrainedConfig):
            continue
        if id(config) not in views:
            drops = [attr for attr, value in vars(config).items() if random_drop(attr, value)]
            views[id(config)] = dropout_free_view(config, drops) if drops else config
        module.config = views[id(config)]
    return model


def dropout_free_view(config, names: Sequence[str]):
    """``config`` with the fields ``names`` read as 0.0: every other read, and every write,
    goes to ``config`` itself, so the model's later config changes reach the modules holding
    the view (a copy would keep the values of the moment it was made). An instance of
    ``config``'s class, as transformers checks; copies, deep copies and pickles stay views."""
    cls = type(config)
    if cls not in _VIEW_CLASSES:
        _VIEW_CLASSES[cls] = type(cls.__name__, (_DropoutFreeView, cls), {"__module__": cls.__module__})
    view = object.__new__(_VIEW_CLASSES[cls])
    object.__setattr__(view, "_view_of", config)
    object.__setattr__(view, "_view_zeroed", frozenset(names))
    return view


class _DropoutFreeView:
    """The attribute routing of ``dropout_free_view``: placed before the config class in the
    MRO, so methods and properties run on the view and read its fields through it."""

    def __getattribute__(self, key: str):
        own = object.__getattribute__
        if key in ("_view_of", "_view_zeroed") or (key.startswith("__") and key != "__dict__"):
            return own(self, key)
        base = own(self, "_view_of")
        zeroed = own(self, "_view_zeroed")
        if key == "__dict__":  # vars(), to_dict(), ==: the fields as the modules read them
            return {**object.__getattribute__(base, "__dict__"), **dict.fromkeys(zeroed, 0.0)}
        key = type(base).attribute_map.get(key, key) if key != "attribute_map" else key
        if key in zeroed:
            return 0.0
        fields = object.__getattribute__(base, "__dict__")
        return fields[key] if key in fields else own(self, key)

    def __setattr__(self, key: str, value) -> None:
        setattr(object.__getattribute__(self, "_view_of"), key, value)

    def __delattr__(self, key: str) -> None:
        delattr(object.__getattribute__(self, "_view_of"), key)

    def __reduce__(self):
        own = object.__getattribute__
        return dropout_free_view, (own(self, "_view_of"), sorted(own(self, "_view_zeroed")))


_VIEW_CLASSES: dict[type, type] = {}


def rows_with_tokens(exp: Experience, rows: list[int]) -> list[int]:
    """The rows (indices of ``exp``) with at least one valid token: the others add exactly 0 to
    every loss, and a forward over them alone has nothing to backpropagate."""
    if not rows:
        return rows
    has = (exp.mask[rows] > 0).any(dim=1).tolist()
    return [row for row, keep in zip(rows, has, strict=True) if keep]


class _Trainable:
    """Model + AdamW + schedule + the skip-on-non-finite optimizer step, shared by actor and critic.

    ``dp``: this process's learner rank. Under FSDP the model is sharded here, before the
    optimizer is built over its (sharded) parameters; every forward goes through ``self.run``.
    """

    def __init__(self, model, optim: OptimConfig, total_steps: int, spec: ForwardSpec,
                 dp: DataParallel = SINGLE):
        self.model = model
        self.spec = spec
        self.dp = dp
        self.run = dp.wrap(model)  # run(fn, *args) = fn(model, *args), through FSDP's root
        self.max_grad_norm = optim.max_grad_norm
        self.skip_zero_grad_steps = optim.skip_zero_grad_steps
        self.time_spent = 0.0  # of the run's time budget, as last told (follow_time_budget)
        self.optimizer, self.scheduler = build_optimizer(model.parameters(), optim, total_steps,
                                                          getattr(model, "config", None), lambda: self.time_spent)
        self.total_steps, self.schedule = total_steps, optim.schedule
        self._offloaded: list[tuple[dict, str, torch.device]] = []  # optimizer state moved to host memory

    def follow_time_budget(self, spent: float) -> None:
        """Tell the schedule how much of the run's time budget is spent (a fraction; the loop
        calls this before each update of a run with ``train.max_seconds``). A cosine schedule is
        as far along as the further of its steps and its time, so a run that ends by its budget
        ends near ``min_lr_ratio`` instead of at a peak lr set for a million steps. The lr of the
        next optimizer step is set again at once; the constant schedule has nothing to follow."""
        self.time_spent = min(1.0, max(0.0, float(spent)))
        step = self.scheduler.last_epoch
        for group, base, factor in zip(self.optimizer.param_groups, self.scheduler.base_lrs,
                                       self.scheduler.lr_lambdas, strict=True):
            group["lr"] = base * factor(step)

    @property
    def lr(self) -> float:
        """The lr the next optimizer step takes."""
        return float(self.optimizer.param_groups[0]["lr"])

    def _optimizer_step(self, finite_loss: bool) -> tuple[float, bool, bool]:
        """Clip, step, zero: (grad_norm, skipped, no_signal).

        A non-finite loss or gradient skips the step (``skipped``). So does a gradient that is
        exactly zero everywhere when ``skip_zero_grad_steps`` (``no_signal``): AdamW would
        still move every weight by its momentum (and decay), and its second moment would decay
        so that the next informative step is larger; skipping keeps the weights, the moments
        and the lr schedule bit-identical, as if the step had not happened.

        Under data parallelism every decision is taken on the global gradient: it is summed
        over ranks first (DDP; FSDP's backward already reduce-scattered it), the flags are
        agreed, and the clipping norm is the norm of the whole gradient.

        ``grad_norm`` is nan when a loss was non-finite: backward stops at the first such
        micro-batch, so no gradient of the mini-batch's loss exists to measure (what had
        accumulated depends on which rows came first, one process or several).
        """
        self.dp.sum_gradients([p for p in self.model.parameters() if p.requires_grad])
        params = [p for p in self.model.parameters() if p.grad is not None]
        finite_loss, nonzero = self.dp.agree(finite_loss, not self.skip_zero_grad_steps or any_nonzero_grad(params))
        no_signal = self.skip_zero_grad_steps and not nonzero
        max_norm = self.max_grad_norm if self.max_grad_norm is not None else float("inf")
        grad_norm = float("nan")
        if finite_loss:
            norm = torch.nn.utils.clip_grad_norm_(params, max_norm) if params else torch.zeros(())
            grad_norm = self.dp.scalar(norm)
        skipped = not (finite_loss and math.isfinite(grad_norm))
        if not (skipped or no_signal):
            self.optimizer.step()
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        return grad_norm, skipped, no_signal and not skipped

    def offload_optimizer_state(self) -> int:
        """Move the optimizer's state (AdamW's two moments: twice the trained weights in fp32)
        from the accelerator to pinned host memory, so generation has that memory; returns the
        bytes moved. Tensors already in host memory stay (on CPU this moves nothing), and so do
        sharded ones (FSDP's DTensors: FSDP2 has its own offload policy)."""
        from torch.distributed.tensor import DTensor

        moved = 0
        for state in self.optimizer.state.values():
            for key, value in state.items():
                if not torch.is_tensor(value) or value.device.type == "cpu" or isinstance(value, DTensor):
                    continue
                host = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
                host.copy_(value, non_blocking=True)
                self._offloaded.append((state, key, value.device))
                state[key] = host
                moved += value.numel() * value.element_size()
        if moved:
            torch.cuda.synchronize()  # the copies must land before the device memory is reused
        return moved

    def restore_optimizer_state(self) -> None:
        """Put what ``offload_optimizer_state`` moved back on the device it came from."""
        for state, key, device in self._offloaded:
            state[key] = state[key].to(device, non_blocking=True)
        self._offloaded = []

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.model.parameters()).dtype

    def adapter_state(self) -> dict[str, Tensor]:
        """The trainable weights when only adapters train (LoRA), for the checkpoint's trainer
        state; {} when the whole model trains (its weights are the checkpoint's model/)."""
        params = dict(self.model.named_parameters())
        trainable = {k: p.detach().cpu().clone() for k, p in params.items() if p.requires_grad}
        return trainable if len(trainable) < len(params) else {}

    def load_adapter_state(self, state: dict[str, Tensor]) -> None:
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for k, v in state.items():
                params[k].copy_(v)

    def state_dict(self) -> dict:
        """Optimizer and schedule, as one process holds them (gathered from the shards under FSDP)."""
        return {"optimizer": self.dp.optimizer_state_dict(self.model, self.optimizer),
                "scheduler": self.scheduler.state_dict(), "total_steps": self.total_steps}

    def load_state_dict(self, state: dict) -> None:
        saved = state.get("total_steps", self.total_steps)  # absent: a checkpoint of an older rlxf
        if self.schedule == "cosine" and saved != self.total_steps:
            # the schedule's lambda is rebuilt from this config: the lr would jump (a run that had
            # decayed to its minimum would climb back), so it is not the run it resumes
            raise UserInputError(
                f"--resume: the learning rate follows a cosine schedule over the run's optimizer steps, "
                f"{saved} in the checkpoint and {self.total_steps} with this config: the run's length "
                f"(train.steps, sft.steps, rm.steps or dpo.steps) changed. Resume with the steps the run "
                f"started with, or start a new run from the checkpoint's model (model.path) to train longer")
        self._offloaded = []  # the loaded state replaces what was offloaded (torch puts it on the device)
        self.dp.load_optimizer_state_dict(self.model, self.optimizer, state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])

    def _idle_passes(self, mini: Experience, done: int, *loss_args) -> None:
        """FSDP: the forward/backward passes this rank owes so that its collectives pair up
        with a rank that holds one more micro-batch; each backpropagates 0 x a real loss
        (``self._loss(micro_batch, *loss_args)``) on the mini-batch's first row."""
        if not self.dp.lockstep:
            return
        for _ in range(self.dp.passes(len(mini), self.spec.micro_batch_size) - done):
            (self._loss(mini.select([0]).trimmed(), *loss_args)[0] * 0.0).backward()


class Actor(_Trainable):
    """The policy π_θ being trained.

    ``mini_batch_size``: the configured samples per optimizer step (``cfg.derived.mini_batch_size``).
    A mini-batch with fewer samples (dynamic sampling kept only the groups that disagree) has its
    loss scaled by samples / mini_batch_size, as if the dropped rows were there with advantage 0.
    None divides by the samples present, so 3 informative samples weigh as much as a full batch.

    ``ptx_coef`` (PPO-ptx, Ouyang et al. 2022): each optimizer step adds ptx_coef x the mean
    NLL per response token of that step's demonstrations to the policy loss,

        L = L_policy + ptx_coef · (−1/|y| Σ log π_θ(y_t | x, y_<t))     over the demonstrations (x, y),

    unscaled by the batch fraction: the demonstrations are all there whatever RL kept. At 0 the
    term is never computed, so the update is the plain one, bit for bit.
    """

    def __init__(self, model, objective: PolicyObjective, optim: OptimConfig, total_steps: int,
                 spec: ForwardSpec, mini_batch_size: int | None = None, dp: DataParallel = SINGLE,
                 ptx_coef: float = 0.0):
        super().__init__(disable_dropout(model), optim, total_steps, spec, dp)
        if mini_batch_size is not None and mini_batch_size < 1:
            raise ValueError(f"Actor: mini_batch_size must be >= 1 or None, got {mini_batch_size!r}")
        self.objective = objective
        self.mini_batch_size = mini_batch_size
        self.ptx_coef = ptx_coef

    def _batch_fraction(self, rows: int) -> float:
        if self.mini_batch_size is None or rows >= self.mini_batch_size:
            return 1.0
        return rows / self.mini_batch_size

    def _logprobs(self, prompt_ids: list[list[int]], response_ids: list[list[int]], **kwargs) -> LogprobOutput:
        """The policy's ``sequence_logprobs``, through ``run``. Under FSDP every trunk forward is
        a collective, and the shared-prompt path runs the trunk twice where packing runs it
        once: the ranks choose it together (each would choose from its own rows, and an idle
        pass's one row never shares, so their all-gathers stopped pairing up)."""
        share: bool | str = "auto"
        if self.dp.lockstep:
            share = self.dp.every(wants_shared_prompts(causal_lm_parts(self.model)[0], prompt_ids, response_ids))
        return self.run(sequence_logprobs, prompt_ids, response_ids, share_prompts=share, **kwargs)

    @torch.no_grad()
    def logprobs(self, prompt_ids: list[list[int]], response_ids: list[list[int]]) -> Tensor:
        spec = self.spec
        return sharded_rows(lambda p, r: self._logprobs(p, r, temperature=spec.temperature, chunk_size=spec.chunk_size,
                                                        packed=spec.packing).logprobs,
                            prompt_ids, response_ids, spec.micro_batch_size, self.dp)

    def update(self, exp: Experience, mini_batches: list[list[int]], kl_coef: float,
               demos: Sequence[Sequence[SFTExample]] | None = None) -> tuple[dict[str, float], Tensor, Tensor]:
        """One optimizer step per mini-batch (a list of row indices of ``exp``).

        When ``exp.old_logprobs`` is None (exactly one optimizer step on fresh samples, so
        π_old = π_θ) the first forward's detached log-probs stand in for it. ``demos``: PPO-ptx
        demonstrations, one batch per optimizer step (at least as many as mini-batches), used
        when ``ptx_coef`` > 0. Returns the step's metrics, the detached log-probs of each
        row's first forward, (B, T), and which rows ran at all, (B,) bool: rows that add nothing
        to the loss are skipped (``rows_to_run``), and their log-probs are left 0.
        """
        use_ptx = self.ptx_coef > 0 and demos is not None
        if use_ptx and len(demos) < len(mini_batches):
            raise ValueError(f"Actor.update: {len(demos)} demonstration batches for {len(mini_batches)} optimizer steps")
        self.model.train()
        acc = _Accumulator(self.dp)
        first = torch.zeros_like(exp.rollout_logprobs)
        seen = torch.zeros(len(exp), dtype=torch.bool)
        ran = 0
        for m, all_rows in enumerate(mini_batches):
            # totals of the whole mini-batch, on every rank: each rank's loss is its share of it
            num_tokens, num_seqs = loss_totals(exp.mask[all_rows])
            rows = self.rows_to_run(exp, all_rows)
            mini = exp.select(rows)
            # the metrics describe the rows that run: their own totals when some were skipped
            run_tokens, run_seqs = loss_totals(mini.mask) if len(rows) < len(all_rows) else (None, None)
            totals = Totals(num_tokens, num_seqs, self._batch_fraction(len(all_rows)), run_tokens, run_seqs)
            mine = list(self.dp.share(len(rows)))
            finite, passes = True, 0
            for idx in micro_batches(len(mine), self.spec.micro_batch_size):
                local = [mine[i] for i in idx]  # this rank's rows, as positions in the mini-batch
                loss, metrics, logp = self._loss(mini.select(local).trimmed(), totals, kl_coef)
                width = logp.shape[1]
                finite = finite and bool(torch.isfinite(loss))
                if finite or self.dp.lockstep:  # FSDP: every rank's backward is a collective
                    loss.backward()
                passes += 1
                acc.add(metrics)
                global_rows = torch.tensor([rows[i] for i in local])
                fresh = ~seen[global_rows]
                first[global_rows[fresh], :width] = logp.detach()[fresh]
            self._idle_passes(mini, passes, totals, kl_coef)
            if rows:
                seen[torch.tensor(rows)] = True  # by some rank: a later epoch may hand the row to another
            ran += len(rows)
            if use_ptx:
                finite = self._ptx_backward(demos[m], acc) and finite
            lr = self.lr  # this step's: the schedule moves on once it is taken
            grad_norm, skipped, no_signal = self._optimizer_step(finite)
            acc.end_mini_batch({"grad_norm": grad_norm, "skipped": float(skipped),
                                "no_signal": float(no_signal), "batch_fraction": totals.batch_fraction,
                                "lr": lr})
        self.dp.sum_(first)  # each row's first forward ran on exactly one rank
        # groups that carry no signal (equal rewards), of those trained on: see trainer.diagnostics
        zero_var = zero_variance_fraction(exp.rewards, exp.group_ids, exp.mask.bool().any(dim=1))
        metrics = acc.result() | {"groups/zero_variance_frac": float(zero_var),
                                  "rows_run_frac": ran / max(1, sum(map(len, mini_batches)))}
        return metrics, first, seen

    def rows_to_run(self, exp: Experience, rows: list[int]) -> list[int]:
        """The rows of a mini-batch whose forward and backward can change the update: all of
        them, unless the objective declares that a row with advantage 0 on every token adds
        exactly 0 to the loss and its gradient (``PolicyObjective.zero_advantage_rows``
        False: the built-in losses without a KL or entropy term). Then those rows are skipped:
        the gradient is the full mini-batch's (its totals still count them), at the cost of
        the rows with signal only; a GRPO group whose samples all earned the same reward is
        such a group. A nan advantage counts as signal, so a broken batch still fails loudly.
        ``train.optim.skip_zero_grad_steps: false`` runs every row (the old behaviour: AdamW
        steps on the zero gradient of a batch without signal). A row with no valid token (an
        episode that failed before the model spoke) never runs: every term of every loss is
        masked, and a micro-batch of such rows alone would have no gradient to backpropagate."""
        rows = rows_with_tokens(exp, rows)
        if self.objective.zero_advantage_rows or not self.skip_zero_grad_steps:
            return rows
        adv = exp.advantages[rows] * exp.mask[rows]
        signal = (adv != 0).any(dim=1).tolist()
        return [row for row, keep in zip(rows, signal, strict=True) if keep]

    def _loss(self, mb: Experience, totals: Totals, kl_coef: float) -> tuple[Tensor, dict[str, Tensor], Tensor]:
        """A micro-batch's forward: (its share of the loss, its metric shares, log-probs (b, t))."""
        out = self._logprobs(mb.prompt_ids, mb.response_ids, temperature=self.spec.temperature,
                             chunk_size=self.spec.chunk_size, packed=self.spec.packing, with_entropy=True)
        logp = out.logprobs.float()
        old = mb.old_logprobs if mb.old_logprobs is not None else logp.detach()
        loss, metrics = self.objective(logp, out.entropy.float() if out.entropy is not None else None, old,
                                       mb.advantages, mb.mask, totals, rollout_logprobs=mb.rollout_logprobs,
                                       ref_logprobs=mb.ref_logprobs, kl_coef=kl_coef)
        return loss, metrics, logp


    def _ptx_backward(self, batch: Sequence[SFTExample], acc: _Accumulator) -> bool:
        """Backward ptx_coef x the demonstrations' mean NLL per token; False if it is not finite.

        Several learner ranks each get the whole batch (a few demonstrations), so each runs the
        same passes (as FSDP's collectives need) and backpropagates 1/world of the term: the
        ranks' gradients, and their metric shares, are summed."""
        tokens = sum(len(e.response_ids) for e in batch)
        nlls: list[float] = []
        finite = True
        scale = self.ptx_coef / self.dp.world
        for share in nll_shares(self._logprobs, batch, self.spec.micro_batch_size, tokens, nlls):
            finite = finite and bool(torch.isfinite(share))
            if finite or self.dp.lockstep:
                (scale * share).backward()
        acc.add({"loss/ptx": torch.tensor(sum(nlls) / self.dp.world)})
        return finite


class Reference:
    """The frozen reference policy π_ref for the KL term."""

    def __init__(self, model, spec: ForwardSpec, dp: DataParallel = SINGLE):
        self.model = model.eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        self.spec = spec
        self.dp = dp

    def logprobs(self, prompt_ids: list[list[int]], response_ids: list[list[int]]) -> Tensor:
        return batched_logprobs(self.model, prompt_ids, response_ids, self.spec, self.dp)


class Critic(_Trainable):
    """The value model V_φ of PPO: a causal-LM trunk with a scalar head."""

    def __init__(self, model, optim: OptimConfig, total_steps: int, spec: ForwardSpec,
                 value_clip: float | None, aggregate, agg_norm: float | None, dp: DataParallel = SINGLE):
        super().__init__(disable_dropout(model), optim, total_steps, spec, dp)
        self.value_clip = value_clip
        self.aggregate = aggregate
        self.agg_norm = agg_norm

    @torch.no_grad()
    def values(self, prompt_ids: list[list[int]], response_ids: list[list[int]]) -> Tensor:
        """V(s_t) before each response token, (B, T)."""
        self.model.eval()
        return sharded_rows(lambda p, r: self.run(sequence_values, p, r, packed=self.spec.packing),
                            prompt_ids, response_ids, self.spec.micro_batch_size, self.dp)

    def update(self, exp: Experience, mini_batches: list[list[int]]) -> dict[str, float]:
        self.model.train()
        acc = _Accumulator(self.dp)
        for all_rows in mini_batches:
            rows = rows_with_tokens(exp, all_rows)  # the value loss is masked everywhere else
            mini = exp.select(rows)
            num_tokens, num_seqs = loss_totals(mini.mask)  # of the whole mini-batch: see Actor.update
            mine = list(self.dp.share(len(rows)))
            # V of the mini-batch's rows, each filled by the rank that runs it: the explained
            # variance is the mini-batch's, not a combination of its micro-batches' (it is no mean)
            values = torch.zeros_like(mini.returns)
            finite, passes = True, 0
            for local in micro_batches(len(mine), self.spec.micro_batch_size):
                idx = [mine[i] for i in local]
                mb = mini.select(idx).trimmed()
                loss, metrics, v = self._loss(mb, num_tokens, num_seqs)
                values[idx, :v.shape[1]] = v.detach()
                finite = finite and bool(torch.isfinite(loss))
                if finite or self.dp.lockstep:
                    loss.backward()
                passes += 1
                share = mb.mask.sum() / num_tokens.clamp(min=1)
                acc.add({"critic/loss": loss.detach(),
                         **{f"critic/{k}": m * share for k, m in metrics.items() if k != "vf_explained_var"}})
            self._idle_passes(mini, passes, num_tokens, num_seqs)
            explained = explained_variance(mini.returns, self.dp.sum_(values), mini.mask)
            grad_norm, skipped, no_signal = self._optimizer_step(finite)
            acc.end_mini_batch({"critic/grad_norm": grad_norm, "critic/skipped": float(skipped),
                                "critic/no_signal": float(no_signal), "critic/vf_explained_var": float(explained)})
        return acc.result()

    def _loss(self, mb: Experience, num_tokens: Tensor, num_seqs: Tensor) -> tuple[Tensor, dict[str, Tensor], Tensor]:
        """A micro-batch's share of the mini-batch's value loss, its metrics, and its values (b, t)."""
        v = self.run(sequence_values, mb.prompt_ids, mb.response_ids, packed=self.spec.packing).float()
        token_loss, metrics = value_loss(v, mb.values, mb.returns, mb.mask, self.value_clip)
        loss = self.aggregate(token_loss, mb.mask, num_tokens=num_tokens, num_seqs=num_seqs, norm=self.agg_norm)
        return loss, metrics, v
