"""rlxf.train, the Python entry point, end to end on the nano model (issue 17 item 7)."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from rl_helpers import metrics

import rlxf
from rlxf.cli.main import main
from rlxf.config import ConfigError


def _rows(n: int, offset: int = 0) -> list[dict]:
    return [{"prompt": f"{i}+{i}=", "answer": str(2 * i), "level": i % 3} for i in range(offset, offset + n)]


def test_train_with_an_in_memory_model_a_dataset_and_callables(tmp_path, nano_model_dir):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(nano_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(nano_model_dir)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    seen: dict[str, list] = {"trl_kwargs": [], "batch_sizes": []}

    def upper(sample):                                  # per sample
        return sum(c.isupper() for c in sample.response) / max(1, len(sample.response))

    def one_per_answer_digit(samples):                  # batched
        seen["batch_sizes"].append(len(samples))
        return [len(s.ground_truth) for s in samples]

    def trl_style(prompts, completions, answer, **columns):   # TRL's signature
        seen["trl_kwargs"].append(sorted(columns))
        assert len(prompts) == len(completions) == len(answer) == len(columns["level"])
        return [0.5] * len(completions)

    result = rlxf.train(
        model=model, tokenizer=tokenizer,
        prompts=Dataset.from_list(_rows(60)), eval_prompts=_rows(4, offset=100),
        reward_funcs=[upper, one_per_answer_digit, trl_style],
        run={"name": "api", "output_dir": str(tmp_path / "runs")},
        rollout={"n": 4, "max_new_tokens": 8}, train={"steps": 2, "prompts_per_step": 4, "micro_batch_size": 8,
                                                      # constant: a cosine schedule's length is fixed
                                                      "optim": {"lr": 3e-3, "schedule": "constant"}},
        eval={"every": 2, "num_problems": 4}, logging={"progress": False, "samples_fraction": 1.0},
    )
    run = tmp_path / "runs" / "api"
    assert result.run_dir == run and result.checkpoint == run / "checkpoints" / "step_2"
    # the CLI's run directory: config, metrics, samples, log, report, an HF-loadable checkpoint
    for name in ("config.yaml", "run.json", "metrics.jsonl", "samples.jsonl", "train.log", "report.html",
                 "checkpoints/step_2/model/config.json", "prompts/train.jsonl", "prompts/test.jsonl"):
        assert (run / name).exists(), name
    assert [m["step"] for m in metrics(run)] == [1, 2]
    assert "eval/accuracy" in result.metrics
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    assert [v["name"] for v in cfg["reward"]["verifiers"]] == ["upper", "one_per_answer_digit", "trl_style"]
    assert cfg["data"]["source"] == "jsonl" and cfg["rollout"]["n"] == 4
    # each call style got what it should: scores are the hand-known values
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2 * 4 * 4
    assert all(s["scores"]["trl_style"] == 0.5 for s in samples)
    assert all(s["scores"]["one_per_answer_digit"] in (1.0, 2.0, 3.0) for s in samples)
    assert all(s["scores"]["upper"] == pytest.approx(sum(c.isupper() for c in s["response"])
                                                     / max(1, len(s["response"]))) for s in samples)
    assert all(kw == ["level"] for kw in seen["trl_kwargs"]) and max(seen["batch_sizes"]) == 16
    # the in-memory model is the one trained
    assert any(not torch.equal(before[k], v) for k, v in model.state_dict().items())
    # and the run directory resumes like the CLI's (only the length may change)
    more = rlxf.train(model=model, tokenizer=tokenizer, prompts=Dataset.from_list(_rows(60)),
                      eval_prompts=_rows(4, offset=100), reward_funcs=[upper, one_per_answer_digit, trl_style],
                      config=run / "config.yaml", train={"steps": 3}, resume=True)
    assert [m["step"] for m in metrics(run)] == [1, 2, 3] and more.checkpoint == run / "checkpoints" / "step_3"
    # a run of `rlxf train` (run.json): another command's --resume is refused by name
    assert main(["sft", str(run / "config.yaml"), "--resume"]) == 2


def test_bad_arguments_are_named(tmp_path, nano_model_dir):
    with pytest.raises(ConfigError, match="tokenizer"):
        rlxf.train(model=torch.nn.Linear(2, 2), prompts=["1+1="])
    with pytest.raises(ConfigError, match=r"reward_funcs\[1\]"):
        rlxf.train(model=nano_model_dir, prompts=["1+1="], reward_funcs=[len, "not a function"])
    with pytest.raises(ConfigError, match=r"prompts\[1\] is a int"):
        rlxf.train(model=nano_model_dir, prompts=["1+1=", 3], run={"output_dir": str(tmp_path)})
    with pytest.raises(ConfigError, match="rollout.n"):
        rlxf.train(model=nano_model_dir, prompts=["1+1="], rollout={"n": "many"}, run={"output_dir": str(tmp_path)})
