"""Each off-policy correction through `rlxf train` on the nano model: it runs and logs its weights."""

from __future__ import annotations

import pytest
from rl_helpers import metrics, write_config

from rlxf.cli.main import main


@pytest.mark.parametrize(("correction", "fraction"), [("tis", "truncated_frac"), ("mis", "masked_frac"),
                                                      ("decoupled", "masked_frac")])
def test_training_with_a_correction_logs_its_weights(tmp_path, nano_model_dir, correction, fraction):
    cfg = write_config(tmp_path, nano_model_dir, train={"steps": 2, "prompts_per_step": 2},
                       checkpoint={"every": 0}, algorithm={"off_policy": correction})
    assert main(["train", str(cfg)]) == 0
    steps = metrics(tmp_path / "runs" / "t")
    assert [m["step"] for m in steps] == [1, 2]
    for m in steps:
        # synchronous: the engine samples with the weights the trainer holds, so ρ = π_old/π_rollout
        # is 1 up to the kernels' rounding (rollout/logprob_gap_max, ~1e-6 in fp32 on CPU)
        gap = m["rollout/logprob_gap_max"]
        assert gap < 1e-4
        assert abs(m["off_policy/ratio_max"] - 1) <= 2 * gap and abs(m["off_policy/ratio_min"] - 1) <= 2 * gap
        assert abs(m["off_policy/weight_mean"] - 1) <= 2 * gap
        assert m[f"off_policy/{fraction}"] == 0.0
