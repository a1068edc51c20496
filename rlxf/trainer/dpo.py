"""`rlxf dpo`: DPO, IPO, conservative DPO and SimPO on preference pairs.

The policy starts from ``model.path``, which is also the reference π_ref. π_ref's summed
log-probs of every pair (train and held-out) are computed once before the first step and
cached by pair uid: π_ref never changes, so one forward per pair is all it ever needs. With
LoRA (``model.lora.r > 0``) the reference is the same model with its adapter disabled, so no
second copy of the weights is held. The loss comes from the ``PREFERENCE_LOSSES`` registry.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch import Tensor

from rlxf.algorithms import masked_sum
from rlxf.algorithms.preference import PairLogps, get_preference_loss
from rlxf.config import Config
from rlxf.config.preference import DPOConfig
from rlxf.data.preference import PreferenceData, PreferenceExample, build_preference_data
from rlxf.models import load_from_config
from rlxf.models.logprobs import sequence_logprobs
from rlxf.run_dir import RunDir
from rlxf.trainer.pairwise import PairRun, train_pairs
from rlxf.trainer.roles import disable_dropout, micro_batches
from rlxf.trainer.trainable import TrainableModel

# (model, pairs) -> (B,) summed log π(y_w | x), (B,) summed log π(y_l | x)
PairLogprobFn = Callable[[torch.nn.Module, list[PreferenceExample]], tuple[Tensor, Tensor]]


def summed_pair_logprobs(model, pairs: list[PreferenceExample]) -> tuple[Tensor, Tensor]:
    """Σ_t log π(a_t|s_t) over the chosen and over the rejected responses, (B,) each, one forward."""
    prompts = [p.prompt_ids for p in pairs]
    out = sequence_logprobs(model, prompts + prompts, [p.chosen_ids for p in pairs] + [p.rejected_ids for p in pairs])
    sums = masked_sum(out.logprobs.float(), out.mask, dim=-1)
    return sums[: len(pairs)], sums[len(pairs):]


def reference_mode(model):
    """The reference forward: a PEFT model with its adapter disabled, else the model as it is
    (called before training, when the weights are still π_ref's)."""
    disable = getattr(model, "disable_adapter", None)
    return disable() if callable(disable) else contextlib.nullcontext()


@torch.no_grad()
def reference_logprobs(model, pairs: list[PreferenceExample], batch_size: int,
                       logprob_fn: PairLogprobFn = summed_pair_logprobs) -> dict[str, tuple[float, float]]:
    """uid -> (log π_ref(y_w|x), log π_ref(y_l|x)) for every pair, in eval mode."""
    was_training = model.training
    model.eval()
    cache: dict[str, tuple[float, float]] = {}
    with reference_mode(model):
        for idx in micro_batches(len(pairs), batch_size):
            mb = [pairs[i] for i in idx]
            chosen, rejected = logprob_fn(model, mb)
            cache.update({p.uid: (float(c), float(r)) for p, c, r in zip(mb, chosen.tolist(), rejected.tolist(),
                                                                          strict=True)})
    model.train(was_training)
    return cache


def data_reference_logprobs(model, data: PreferenceData, micro_batch_size: int) -> dict[str, tuple[float, float]]:
    """``reference_logprobs`` of the train and the held-out pairs. The held-out ones go in the
    micro-batches ``DPOObjective.evaluate`` runs: a packed forward's float rounding depends on
    what shares its batch, so any other grouping leaves h a few 1e-6 off 0 where the policy is
    π_ref, and the reward accuracy of evaluation at step 0 the sign of that noise, not 1/2."""
    return {**reference_logprobs(model, data.train, micro_batch_size),
            **reference_logprobs(model, data.test, micro_batch_size)}


class DPOObjective:
    prefix = "dpo"

    def __init__(self, model, cfg: DPOConfig, reference: dict[str, tuple[float, float]] | None,
                 logprob_fn: PairLogprobFn = summed_pair_logprobs):
        # h compares the training forward with π_ref's (eval) forward: dropout would make it noise
        self.model = disable_dropout(model)
        self.cfg = cfg
        self.loss = get_preference_loss(cfg.loss)
        self.reference = reference
        self.logprob_fn = logprob_fn

    def _pair_logps(self, pairs: list[PreferenceExample]) -> PairLogps:
        chosen, rejected = self.logprob_fn(self.model, pairs)
        ref_c = ref_r = None
        if self.loss.needs_reference:
            ref = torch.tensor([self.reference[p.uid] for p in pairs], dtype=chosen.dtype, device=chosen.device)
            ref_c, ref_r = ref[:, 0], ref[:, 1]
        lengths = torch.tensor([[len(p.chosen_ids), len(p.rejected_ids)] for p in pairs], device=chosen.device)
        return PairLogps(chosen, rejected, ref_c, ref_r, lengths[:, 0], lengths[:, 1])

    def __call__(self, pairs: list[PreferenceExample]) -> tuple[Tensor, dict[str, Tensor]]:
        p = self._pair_logps(pairs)
        losses, metrics = self.loss.fn(p, beta=self.cfg.beta, label_smoothing=self.cfg.label_smoothing,
                                       gamma=self.cfg.gamma)
        return losses, {**metrics, "logps_chosen": p.chosen.detach().mean(),
                        "logps_rejected": p.rejected.detach().mean()}

    @torch.no_grad()
    def evaluate(self, pairs: list[PreferenceExample]) -> dict[str, float]:
        """Held-out loss, reward accuracy and margin, chosen/rejected log-probs (pair means)."""
        self.model.eval()
        totals: dict[str, float] = {}
        for idx in micro_batches(len(pairs), self.cfg.micro_batch_size):
            losses, metrics = self([pairs[i] for i in idx])
            for k, v in {"loss": losses.mean(), **metrics}.items():
                totals[k] = totals.get(k, 0.0) + float(v) * len(idx) / len(pairs)
        return {f"eval/dpo/{k}": v for k, v in totals.items()}


def run_dpo(cfg: Config, run: RunDir, *, resume: bool = False) -> dict[str, float]:
    """``rlxf dpo``: train ``model.path`` on ``data`` (preference pairs); writes
    ``<run>/checkpoints/step_N/model``."""
    from rlxf.config import dump_config
    from rlxf.rollout.hf import model_context_window

    run.write_config(dump_config(cfg))
    torch.manual_seed(cfg.seeds.init)  # LoRA's initialisation
    model, tokenizer = load_from_config(cfg.model)
    data = build_preference_data(cfg.data, tokenizer, seed=cfg.seeds.data,
                                 context_window=model_context_window(model.config))
    reference = None
    if get_preference_loss(cfg.dpo.loss).needs_reference:
        # before any step (and before a resumed run loads its checkpoint): the weights are π_ref's
        reference = data_reference_logprobs(model, data, cfg.dpo.micro_batch_size)
    core = TrainableModel(model, cfg.dpo.optim, cfg.dpo.steps, cfg.dpo.micro_batch_size)
    objective = DPOObjective(model, cfg.dpo, reference)
    return train_pairs(PairRun(core, objective, data, tokenizer), cfg, cfg.dpo, run, resume=resume)
