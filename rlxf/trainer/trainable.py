"""The trainable-model core of the single-process recipes (SFT, reward model, DPO).

``TrainableModel`` is the RL actor's and critic's ``_Trainable`` (rlxf.trainer.roles: AdamW,
schedule, gradient clipping, the step skipped on a non-finite loss or gradient, LoRA adapter
state), subclassed rather than copied so every recipe takes the same optimizer step, plus what
a recipe that is not driven by the RL loop needs: one call per optimizer step over a stream of
micro-batch losses, and a checkpoint of the model and its optimizer that resumes bit for bit.

    core = TrainableModel(model, cfg.optim, total_steps=cfg.steps)
    metrics = core.train_step(loss for loss in micro_batch_losses)  # grad_norm, skipped, lr
    core.save(directory, tokenizer)     # model/ (HF, loadable) + learner_state.pt
    core.load(directory)                # weights, optimizer, schedule, adapters

Every recipe saves through ``checkpoint_trainable`` into the one run layout
(``<run>/checkpoints/step_N/model``, ``rlxf.models.paths``), so a run directory is a valid
``model.path`` whichever command wrote it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

import torch
from torch import Tensor

from rlxf.config.train import OptimConfig
from rlxf.errors import UserInputError
from rlxf.metrics.sinks import truncate_after_step
from rlxf.models import ValueModel, load_model, save_model
from rlxf.run_dir import RunDir
from rlxf.trainer.checkpoint import intact_checkpoint, load_trainer_state, save_checkpoint, set_rng_state
from rlxf.trainer.roles import ForwardSpec, _Trainable
from rlxf.trainer.state import train_on_hint

log = logging.getLogger("rlxf")

STATE_FILE = "learner_state.pt"


class TrainableModel(_Trainable):
    """A causal LM or a ``ValueModel`` with its optimizer, stepped once per ``train_step``."""

    def __init__(self, model, optim: OptimConfig, total_steps: int, micro_batch_size: int = 1):
        super().__init__(model, optim, total_steps, ForwardSpec(micro_batch_size=micro_batch_size))

    def train_step(self, losses: Iterable[Tensor]) -> dict[str, float]:
        """Backward each micro-batch loss (each already a share of the step's mean), then one
        optimizer step. Once a loss is non-finite the rest are not backpropagated and the step is
        skipped (weights and optimizer state unchanged), as in the RL actor."""
        self.model.train()
        finite = True
        for loss in losses:
            finite = finite and bool(torch.isfinite(loss))
            if finite:
                loss.backward()
        lr = self.lr  # this step's: the schedule moves on once it is taken
        grad_norm, skipped, no_signal = self._optimizer_step(finite)
        return {"grad_norm": grad_norm, "skipped": float(skipped), "no_signal": float(no_signal), "lr": lr}

    def save_weights(self, out_dir: Path, tokenizer=None) -> None:
        """The model in HF format: a ValueModel with its head, a LoRA model merged."""
        if isinstance(self.model, ValueModel):
            self.model.save_pretrained(out_dir, tokenizer)
        else:
            save_model(self.model, out_dir, tokenizer)

    def save(self, directory: Path, tokenizer=None) -> None:
        """``directory/model`` (``save_weights``) and the optimizer, schedule and adapter
        weights in ``directory/learner_state.pt``."""
        self.save_weights(directory / "model", tokenizer)
        torch.save({"optim": self.state_dict(), "trainable": self.adapter_state()}, directory / STATE_FILE)

    def load(self, directory: Path) -> None:
        """Restore what ``save`` wrote into this (same-shaped) model and optimizer."""
        state = torch.load(directory / STATE_FILE, map_location="cpu", weights_only=True)
        if "optim" not in state:  # the RL learner's {"actor", "critic", "kl", ...}
            raise UserInputError(
                f"--resume: {directory} is a checkpoint of an RL run (`rlxf train`), not of `rlxf sft`, `rlxf rm` "
                f"or `rlxf dpo`; continue it with `rlxf train CONFIG --resume`")
        check_adapters_fit(state["trainable"], self.model, directory)
        if state["trainable"]:  # LoRA: model/ is merged, the adapters are in the state
            self.load_adapter_state(state["trainable"])
        else:
            if isinstance(self.model, ValueModel):
                fresh = ValueModel.from_pretrained(directory / "model", device=self.device, dtype=self.dtype)
            else:
                fresh = load_model(directory / "model", device=self.device, dtype=self.dtype)
            self.model.load_state_dict(fresh.state_dict())
            del fresh
        self.load_state_dict(state["optim"])


def check_adapters_fit(saved: dict[str, Tensor], model: torch.nn.Module, directory: Path) -> None:
    """Refuse to resume from the checkpoint ``directory`` whose saved adapters do not fit ``model``
    (``adapter_mismatch``), saying how to go on."""
    problem = adapter_mismatch(saved, model)
    if problem:
        raise UserInputError(
            f"--resume: {directory} does not fit this config's model: {problem}. Resume with the model.lora "
            f"the run was started with, or start a new run from the checkpoint's (merged) model: "
            f"model.path={directory / 'model'}")


def adapter_mismatch(saved: dict[str, Tensor], model: torch.nn.Module) -> str | None:
    """How the adapter weights a checkpoint saved (``_Trainable.adapter_state``; {} when the
    whole model trained) differ from ``model``'s trainable ones, or None when they fit. A changed
    ``model.lora`` would otherwise fail with a bare KeyError or size mismatch, or, with more
    target modules than saved, resume the new ones from scratch without a word."""
    params = dict(model.named_parameters())
    trainable = {k: tuple(p.shape) for k, p in params.items() if p.requires_grad}
    mine = trainable if len(trainable) < len(params) else {}
    if not saved and not mine:
        return None
    if not saved:
        return "it was saved training the whole model (model.lora.r = 0), this config trains LoRA adapters"
    if not mine:
        return f"it holds {len(saved)} LoRA adapter tensors, this config trains the whole model (model.lora.r = 0)"
    missing = [k for k in mine if k not in saved]
    extra = [k for k in saved if k not in mine]
    shape = next(((k, tuple(v.shape), mine[k]) for k, v in saved.items() if k in mine and tuple(v.shape) != mine[k]),
                 None)
    if missing:
        return f"this config's LoRA adapters include {missing[0]} ({len(missing)} tensors) that the checkpoint lacks"
    if extra:
        return f"the checkpoint's LoRA adapters include {extra[0]} ({len(extra)} tensors) that this config lacks"
    if shape:
        return f"{shape[0]} is {shape[1]} in the checkpoint and {shape[2]} with this config (model.lora.r changed?)"
    return None


def checkpoint_trainable(run: RunDir, step: int, core: TrainableModel, tokenizer, sampler, *, keep_last: int,
                         annotate: Callable[[Path], None] | None = None) -> Path:
    """Save ``core`` and the data ``sampler``'s position as ``<run>/checkpoints/step_<step>``
    (atomically; the newest ``keep_last`` are kept, see ``save_checkpoint``). ``annotate(model_dir)``
    may add files next to the saved model (a reward model's score statistics). Returns the
    checkpoint directory."""
    def write(directory: Path) -> None:
        core.save(directory, tokenizer)
        if annotate is not None:
            annotate(directory / "model")

    return save_checkpoint(run.checkpoints, step, write=write, state={"sampler": sampler.state_dict()},
                           keep_last=keep_last)


def resume_trainable(run: RunDir, core: TrainableModel, sampler, *, steps: int, field: str) -> int:
    """Load the run's newest checkpoint into ``core``, the data ``sampler`` and the RNGs, and cut
    metrics.jsonl back to its step; returns that step (0 when there is no checkpoint yet: the
    run starts over, and what it logged before, its first evaluation too, is dropped). A newest
    checkpoint whose files do not read back is skipped for the one before it (``intact_checkpoint``).
    A run already at or past ``steps`` (the config's ``field``, lowered since) is said to train nothing."""
    ckpt = intact_checkpoint(run.checkpoints)
    if ckpt is None:
        truncate_after_step(run.metrics, -1)
        return 0
    state = load_trainer_state(ckpt)
    core.load(ckpt)
    sampler.load_state_dict(state["sampler"])
    set_rng_state(state["rng"])
    step = int(state["step"])
    truncate_after_step(run.metrics, step)
    log.info("resumed from %s (step %d)", ckpt, step)
    if step >= steps:
        log.warning("--resume: the run has done %d steps and %s is %d: nothing to train; %s",
                    step, field, steps, train_on_hint(field, core.schedule))
    return step
