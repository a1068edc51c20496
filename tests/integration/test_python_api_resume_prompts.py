"""rlxf.train(resume=True) with other prompts than the run's is refused before anything is
written: the run's saved prompts (which its config.yaml names as its data) stay as they were."""

from __future__ import annotations

import pytest
from rl_helpers import metrics

import rlxf
from rlxf.config import ConfigError


def _rows(n: int, offset: int = 0) -> list[dict]:
    return [{"prompt": f"{i}+{i}=", "answer": str(2 * i)} for i in range(offset, offset + n)]


def upper(sample):
    return sum(c.isupper() for c in sample.response) / max(1, len(sample.response))


def _train(tmp_path, nano_model_dir, prompts, steps: int, **kwargs):
    return rlxf.train(model=nano_model_dir, prompts=prompts, reward_funcs=[upper],
                      run={"name": "api", "output_dir": str(tmp_path / "runs")},
                      rollout={"n": 2, "max_new_tokens": 4},
                      # a constant lr: the resumes below lengthen the run, which a cosine schedule's may not
                      train={"steps": steps, "prompts_per_step": 2, "micro_batch_size": 4,
                             "optim": {"schedule": "constant"}},
                      eval={"every": 0}, logging={"progress": False}, **kwargs)


def test_a_resume_with_other_prompts_is_refused_and_keeps_the_saved_ones(tmp_path, nano_model_dir):
    run = _train(tmp_path, nano_model_dir, _rows(8), steps=1).run_dir
    saved = run / "prompts" / "train.jsonl"
    before = saved.read_bytes()
    with pytest.raises(ConfigError, match=f"differ from .*{saved}") as e:
        _train(tmp_path, nano_model_dir, _rows(8, offset=50), steps=2, resume=True)
    assert "row 0" in str(e.value)
    assert saved.read_bytes() == before
    with pytest.raises(ConfigError, match="8 rows"):
        _train(tmp_path, nano_model_dir, _rows(9), steps=2, resume=True)
    assert saved.read_bytes() == before
    # the same prompts resume (their keys in another order are the same records)
    same = [{"answer": r["answer"], "prompt": r["prompt"]} for r in _rows(8)]
    result = _train(tmp_path, nano_model_dir, same, steps=2, resume=True)
    assert [m["step"] for m in metrics(run)] == [1, 2] and result.checkpoint == run / "checkpoints" / "step_2"
    assert saved.read_bytes() == before
