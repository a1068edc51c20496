"""`rlxf rm`: a Bradley–Terry reward model r(x, y) trained on preference pairs.

The model is a ``ValueModel`` (the trunk of ``model.path`` with a new zero scalar head) read at
the last token of prompt + response (``sequence_scores``); with ``model.lora.r > 0`` only LoRA
adapters on the trunk and the whole head train, and the saved trunk has them merged. The loss is
ℓ = -log σ(r(x, y_w) - r(x, y_l) - m) (``bradley_terry_loss``). Each checkpoint's
``model/`` (``<run>/checkpoints/step_N/model``; the run directory itself names the newest) is
what the ``reward_model`` verifier loads (``reward.verifiers: [{type: reward_model, path:
...}]``) and what PPO's critic can start from (``critic.path``): the trunk in HF format,
value_head.safetensors, and reward_stats.json, the mean and spread of the model's scores on its
training responses, which the verifier's ``normalize: standard`` puts RL rewards on.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor

from rlxf.algorithms import bradley_terry_loss
from rlxf.config import Config
from rlxf.data.preference import PreferenceExample, build_preference_data
from rlxf.models import ValueModel, sequence_scores
from rlxf.models.loading import tokenizer_from_config
from rlxf.rewards.reward_model import ScoreStats
from rlxf.run_dir import RunDir
from rlxf.trainer.pairwise import PairRun, train_pairs
from rlxf.trainer.roles import disable_dropout, micro_batches
from rlxf.trainer.trainable import TrainableModel


def pair_scores(model: ValueModel, pairs: list[PreferenceExample]) -> tuple[Tensor, Tensor]:
    """(B,) scores of the chosen and of the rejected responses, in one forward."""
    prompts = [p.prompt_ids for p in pairs]
    scores = sequence_scores(model, prompts + prompts, [p.chosen_ids for p in pairs] + [p.rejected_ids for p in pairs])
    return scores[: len(pairs)], scores[len(pairs):]


class BradleyTerryObjective:
    prefix = "rm"

    def __init__(self, model: ValueModel, margin: float | None, eval_batch_size: int):
        # r_w - r_l compares two training forwards: dropout would add noise to every margin (TRL's default)
        self.model = disable_dropout(model)
        self.margin = margin
        self.eval_batch_size = eval_batch_size

    def __call__(self, pairs: list[PreferenceExample]) -> tuple[Tensor, dict[str, Tensor]]:
        chosen, rejected = pair_scores(self.model, pairs)
        return bradley_terry_loss(chosen, rejected, self.margin)

    @torch.no_grad()
    def evaluate(self, pairs: list[PreferenceExample]) -> dict[str, float]:
        """Held-out pair accuracy (P[r_w > r_l], a tie counting 1/2), mean score margin, mean scores and loss."""
        self.model.eval()
        chosen, rejected = [], []
        for idx in micro_batches(len(pairs), self.eval_batch_size):
            c, r = pair_scores(self.model, [pairs[i] for i in idx])
            chosen.append(c)
            rejected.append(r)
        c, r = torch.cat(chosen), torch.cat(rejected)
        losses, m = bradley_terry_loss(c, r, self.margin)
        return {"eval/rm/loss": float(losses.mean()), **{f"eval/rm/{k}": float(v) for k, v in m.items()}}

    @torch.no_grad()
    def score_stats(self, pairs: list[PreferenceExample]) -> ScoreStats:
        """μ and σ (population) of the model's scores on the chosen and the rejected responses."""
        self.model.eval()
        scores = torch.cat([torch.cat(pair_scores(self.model, [pairs[i] for i in idx]))
                            for idx in micro_batches(len(pairs), self.eval_batch_size)])
        return ScoreStats(mean=float(scores.mean()), std=float(scores.std(correction=0)), count=len(scores))


def run_reward_model(cfg: Config, run: RunDir, *, resume: bool = False) -> dict[str, float]:
    """``rlxf rm``: train on ``data`` (preference pairs); writes ``<run>/checkpoints/step_N/model``
    with reward_stats.json from the first ``rm.stats_pairs`` training pairs."""
    from rlxf.config import dump_config
    from rlxf.rollout.hf import model_context_window

    run.write_config(dump_config(cfg))
    m = cfg.model
    tokenizer = tokenizer_from_config(m)  # model.revision is model.path's, not a separate tokenizer's
    torch.manual_seed(cfg.seeds.init)
    model = ValueModel.from_pretrained(m.path, device=m.device, dtype=m.dtype, revision=m.revision,
                                       gradient_checkpointing=m.gradient_checkpointing,
                                       trust_remote_code=m.trust_remote_code, attn_implementation=m.attn_implementation,
                                       linear_kernels=m.linear_kernels, lora=m.lora)
    # an over-long response keeps its end, the eos the score is read at, as the verifier cuts it
    data = build_preference_data(cfg.data, tokenizer, seed=cfg.seeds.data, keep_response="last",
                                 context_window=model_context_window(model.config))
    core = TrainableModel(model, cfg.rm.optim, cfg.rm.steps, cfg.rm.micro_batch_size)
    objective = BradleyTerryObjective(model, cfg.rm.margin, cfg.rm.micro_batch_size)
    stats_pairs = data.train[: cfg.rm.stats_pairs]

    def annotate(model_dir: Path) -> None:
        objective.score_stats(stats_pairs).save(model_dir)

    return train_pairs(PairRun(core, objective, data, tokenizer, annotate), cfg, cfg.rm, run, resume=resume)
