"""The logged ``entropy`` is nats per token whatever the loss aggregation (the report plots it so)."""

from __future__ import annotations

import pytest
import torch

from rlxf.algorithms import loss_totals
from rlxf.config.algorithm import AlgorithmConfig
from rlxf.trainer.objective import PolicyObjective, Totals


@pytest.mark.parametrize("agg", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"])
def test_entropy_is_logged_per_token_under_every_aggregation(agg):
    # rows of 3 and 1 valid tokens, entropies 1, 2, 3 and 4: per token (1 + 2 + 3 + 4) / 4 = 2.5
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    entropy = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
    logp = torch.zeros(2, 3)
    objective = PolicyObjective.from_config(AlgorithmConfig(loss_agg=agg), max_new_tokens=8)
    num_tokens, num_seqs = loss_totals(mask)
    whole = objective(logp, entropy, logp, torch.zeros(2, 3), mask, Totals(num_tokens, num_seqs))[1]
    assert float(whole["entropy"]) == pytest.approx(2.5)
    # micro-batches of one row each sum to the same figure
    parts = [objective(logp[i:i + 1], entropy[i:i + 1], logp[i:i + 1], torch.zeros(1, 3), mask[i:i + 1],
                       Totals(num_tokens, num_seqs))[1]["entropy"] for i in range(2)]
    assert float(sum(parts)) == pytest.approx(2.5)
