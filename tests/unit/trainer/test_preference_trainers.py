"""The preference trainers' objectives through the shared optimizer step, on hand-derived values.

A fake policy holds each pair's summed log-probs as parameters, so every loss of the DPO family
can be checked against its paper's formula through the same path `rlxf dpo` takes (objective,
micro-batch shares, TrainableModel step), and its gradient checked for direction.
"""

from __future__ import annotations

import math

import pytest
import torch

from rlxf.config.preference import DPOConfig
from rlxf.config.train import OptimConfig
from rlxf.data.preference import PreferenceExample
from rlxf.trainer.dpo import DPOObjective, reference_logprobs
from rlxf.trainer.pairwise import _loss_shares
from rlxf.trainer.trainable import TrainableModel


class FakePolicy(torch.nn.Module):
    """log π(y_w|x), log π(y_l|x) of pair i are ``table[i]``: a policy we can set by hand."""

    def __init__(self, table: list[tuple[float, float]]):
        super().__init__()
        self.table = torch.nn.Parameter(torch.tensor(table, dtype=torch.float32))


def fake_logprobs(model: FakePolicy, pairs: list[PreferenceExample]):
    idx = torch.tensor([int(p.uid) for p in pairs])
    return model.table[idx, 0], model.table[idx, 1]


def pair(i: int, chosen_len: int, rejected_len: int) -> PreferenceExample:
    return PreferenceExample(str(i), [1], [2] * chosen_len, [3] * rejected_len, "p", "c", "r")


# one pair: log π(y_w) = -1, log π(y_l) = -3; π_ref gives both -2; so h = (-1+2) - (-3+2) = 2.
# |y_w| = 2, |y_l| = 4 tokens.
def _sp(x: float) -> float:  # softplus: -log σ(-x) = log(1 + e^x)
    return math.log1p(math.exp(x))


CASES = {
    # Rafailov et al. 2023: -log σ(β h), β = 0.5 -> -log σ(1)
    "dpo": ({"beta": 0.5}, _sp(-1.0)),
    # Azar et al. 2023: (h - 1/(2β))² = (2 - 1)²
    "ipo": ({"beta": 0.5}, 1.0),
    # Mitchell 2023, ε = 0.1: -(0.9) log σ(1) - 0.1 log σ(-1)
    "cdpo": ({"beta": 0.5, "label_smoothing": 0.1}, 0.9 * _sp(-1.0) + 0.1 * _sp(1.0)),
    # Meng et al. 2024, β = 2, γ = 1: -log σ(2·(-1)/2 - 2·(-3)/4 - 1) = -log σ(-0.5)
    "simpo": ({"beta": 2.0, "gamma": 1.0}, _sp(0.5)),
}


@pytest.mark.parametrize("loss", list(CASES))
def test_each_dpo_family_loss_matches_its_formula_through_the_trainer(loss):
    options, expected = CASES[loss]
    policy = FakePolicy([(-1.0, -3.0)])
    pairs = [pair(0, 2, 4)]
    cfg = DPOConfig(loss=loss, batch_size=1, micro_batch_size=1, **options)
    objective = DPOObjective(policy, cfg, {"0": (-2.0, -2.0)}, logprob_fn=fake_logprobs)
    core = TrainableModel(policy, OptimConfig(lr=0.1, max_grad_norm=None), total_steps=1)
    metrics: dict[str, float] = {}
    step = core.train_step(_loss_shares(objective, pairs, 1, metrics))
    assert metrics["loss"] == pytest.approx(expected, rel=1e-6)
    assert metrics["logps_chosen"] == -1.0 and metrics["logps_rejected"] == -3.0
    assert step["skipped"] == 0.0
    chosen, rejected = policy.table.detach()[0].tolist()
    if loss == "ipo":  # IPO's target is h = 1/(2β) = 1 < 2: it lowers the margin
        assert chosen < -1.0 and rejected > -3.0
    else:              # the others raise log π(y_w) and lower log π(y_l)
        assert chosen > -1.0 and rejected < -3.0


def test_micro_batches_give_the_batch_mean_and_metrics():
    """Two pairs in two micro-batches: the step's loss is the mean of the two pair losses."""
    policy = FakePolicy([(-1.0, -3.0), (-2.0, -1.0)])
    pairs = [pair(0, 1, 1), pair(1, 1, 1)]
    ref = {"0": (-2.0, -2.0), "1": (-2.0, -2.0)}     # h = 2 and h = -1
    objective = DPOObjective(policy, DPOConfig(beta=1.0, batch_size=2, micro_batch_size=1), ref,
                             logprob_fn=fake_logprobs)
    metrics: dict[str, float] = {}
    TrainableModel(policy, OptimConfig(), total_steps=1).train_step(_loss_shares(objective, pairs, 1, metrics))
    assert metrics["loss"] == pytest.approx((_sp(-2.0) + _sp(1.0)) / 2, rel=1e-6)
    assert metrics["reward_accuracy"] == pytest.approx(0.5)
    # implicit rewards β(log π - log π_ref): chosen (1, 0), rejected (-1, 1) -> margin mean (2 + -1) / 2
    assert metrics["reward_margin"] == pytest.approx(0.5)


def test_a_non_finite_loss_skips_the_step_and_leaves_the_weights():
    policy = FakePolicy([(-1.0, float("nan"))])
    objective = DPOObjective(policy, DPOConfig(batch_size=1, micro_batch_size=1), {"0": (-2.0, -2.0)},
                             logprob_fn=fake_logprobs)
    core = TrainableModel(policy, OptimConfig(), total_steps=1)
    before = policy.table.detach().clone()
    step = core.train_step(_loss_shares(objective, [pair(0, 1, 1)], 1, {}))
    assert step["skipped"] == 1.0
    assert policy.table.detach()[0, 0] == before[0, 0]   # (the other entry is NaN, never equal)
    assert not core.optimizer.state  # AdamW never stepped


def test_reference_of_a_lora_model_is_the_base_model(nano_model_dir):
    pytest.importorskip("peft")
    from rlxf.config.model import LoraConfig
    from rlxf.models import load_model
    from rlxf.trainer.dpo import summed_pair_logprobs

    base = load_model(nano_model_dir, device="cpu")
    model = load_model(nano_model_dir, device="cpu", lora=LoraConfig(r=4, alpha=8))
    with torch.no_grad():  # a trained adapter: B != 0 changes the model's log-probs
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.fill_(0.05)
    pairs = [PreferenceExample(str(i), [5, 6, 7], [8 + i, 9], [10, 11 + i, 12], "p", "c", "r") for i in range(3)]
    ref = reference_logprobs(model, pairs, batch_size=2)
    with torch.no_grad():
        base_c, base_r = summed_pair_logprobs(base.eval(), pairs)
        lora_c, _ = summed_pair_logprobs(model.eval(), pairs)
    assert torch.allclose(torch.tensor([ref[p.uid][0] for p in pairs]), base_c, atol=1e-4)
    assert torch.allclose(torch.tensor([ref[p.uid][1] for p in pairs]), base_r, atol=1e-4)
    assert not torch.allclose(lora_c, base_c, atol=1e-2)
