"""With no held-out prompts nothing is measured: training skips evaluation (one warning, no eval/*
metrics, no accuracy claimed at the end) and `rlxf eval` refuses (exit 2) instead of reporting 0%."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest
from rl_helpers import metrics, write_config

from rlxf.cli.main import main
from rlxf.config import load_config
from rlxf.errors import UserInputError
from rlxf.rollout import SamplingParams


def _config_without_test_split(tmp_path, model_dir):
    """A GRPO config on a prompts file with no test_path, evaluating at the start and every step."""
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n"
                             for a in range(5) for b in range(5)))
    return write_config(
        tmp_path, model_dir,
        data={"source": "jsonl", "task": None, "task_options": {}, "train_path": str(train), "test_path": None,
              "fields": {"ground_truth": "answer"}, "max_prompt_len": 64},
        train={"steps": 2, "prompts_per_step": 2, "micro_batch_size": 8},
        eval={"every": 1, "at_start": True, "num_problems": 4},
        checkpoint={"every": 0},
    )


def test_training_skips_evaluation_and_eval_refuses(tmp_path, nano_model_dir, capsys):
    cfg = _config_without_test_split(tmp_path, nano_model_dir)
    run = tmp_path / "runs" / "t"
    assert main(["train", str(cfg)]) == 0
    rows = metrics(run)
    assert [r["step"] for r in rows if "step" in r][-1] == 2
    assert not [k for r in rows for k in r if k.startswith("eval/")], "no made-up eval/accuracy"
    log = (run / "train.log").read_text()
    warnings = [line for line in log.splitlines() if "no held-out prompts" in line]
    assert len(warnings) == 1 and "evaluation is skipped" in log and "data.test_path" in log
    done = next(line for line in log.splitlines() if "done:" in line)
    assert "eval" not in done.split("; report")[0]
    assert "eval acc" not in capsys.readouterr().err
    # report.html: the headline's eval/accuracy cell is empty ("-"), not 0
    headline = (run / "report.html").read_text().split("<h2>Headline</h2>", 1)[1].split("</table>", 1)[0]
    columns = re.findall(r"<th>(.*?)</th>", headline)
    cells = re.findall(r"<td>(.*?)</td>", headline)
    assert cells[columns.index("eval/accuracy (last)")] == "-"

    capsys.readouterr()
    assert main(["eval", str(cfg), "--checkpoint", str(run)]) == 2
    err = capsys.readouterr().err
    assert "no held-out prompts" in err and "data.test_path" in err
    assert not (run / "eval.jsonl").exists()


def test_evaluate_saved_model_refuses_without_held_out_prompts(tmp_path, nano_model_dir):
    from rlxf.trainer.evaluate import NoHeldOutPrompts, evaluate_saved_model

    cfg = load_config(_config_without_test_split(tmp_path, nano_model_dir))
    with pytest.raises(NoHeldOutPrompts, match="data.test_path"):
        evaluate_saved_model(nano_model_dir, cfg, 4)


def test_evaluate_rollout_of_no_prompts_is_an_error_not_zero():
    from rlxf.trainer.evaluate import NoHeldOutPrompts, evaluate_rollout

    class NeverCalled:
        def generate(self, *args, **kwargs):
            raise AssertionError("nothing to generate")

    with pytest.raises(NoHeldOutPrompts) as caught:
        evaluate_rollout(NeverCalled(), [], SamplingParams(n=1, max_new_tokens=4))
    assert isinstance(caught.value, UserInputError)


def test_the_hint_names_the_field_that_gives_a_held_out_split():
    from rlxf.trainer.evaluate import no_held_out_hint

    def data(**kw):
        return SimpleNamespace(**{"sources": [], "source": "jsonl", **kw})

    assert "data.test_path" in no_held_out_hint(data())
    assert "data.test_split" in no_held_out_hint(data(source="hf"))
    assert "data.sources[i].test_path" in no_held_out_hint(data(sources=[data()]))
    assert "data.max_prompt_len" in no_held_out_hint(data(source="task"))


def _sft_config_without_test_split(tmp_path, model_dir, **sft):
    """An `rlxf sft` config on a file of demonstrations with no test_path, evaluating every 2 steps."""
    import yaml  # noqa: PLC0415

    train = tmp_path / "demos.jsonl"
    train.write_text("".join(json.dumps({"prompt": f"{a}+{b}=", "answer": str(a + b)}) + "\n"
                             for a in range(5) for b in range(5)))
    path = tmp_path / "sft.yaml"
    path.write_text(yaml.safe_dump({
        "run": {"name": "sft", "output_dir": str(tmp_path / "runs"), "seed": 0},
        "model": {"path": str(model_dir)},
        "data": {"source": "jsonl", "task": None, "task_options": {}, "train_path": str(train), "test_path": None,
                 "fields": {"ground_truth": "answer", "response": "answer"}, "max_prompt_len": 32},
        "rollout": {"max_new_tokens": 4},
        "reward": {"verifiers": [{"type": "numeric", "extract": ["last_number"]}]},
        "sft": {"steps": 4, "batch_size": 4, "micro_batch_size": 4, "eval_every": 2, **sft},
        "logging": {"progress": False},
    }))
    return path


def test_sft_without_held_out_prompts_warns_and_refuses_a_stop_rule(tmp_path, nano_model_dir, capsys):
    assert main(["sft", str(_sft_config_without_test_split(tmp_path, nano_model_dir))]) == 0
    run = tmp_path / "runs" / "sft"
    log = (run / "train.log").read_text()
    assert "sft.eval_every: evaluation is skipped" in log and "no held-out prompts" in log
    first = metrics(run)
    assert first and not [k for r in first for k in r if k.startswith("eval/")]
    # a stop rule that could never be read is refused before the first step, not at the first evaluation
    stop = {"metric": "eval/accuracy", "at_least": 0.5}
    assert main(["sft", str(_sft_config_without_test_split(tmp_path, nano_model_dir, stop_when=stop)),
                 "--overwrite"]) == 2
    err = capsys.readouterr().err
    assert "sft.stop_when" in err and "no held-out prompts" in err
    assert metrics(run) == first, "the run it was to replace is put back as it was"


def test_evaluate_saved_model_reads_the_held_out_split_the_run_drew(tmp_path, nano_model_dir, monkeypatch):
    """Its split came from run.seed, the run's from run.data_seed: with `run.data_seed: 7` the
    quickstart's and the benchmarks' final tables scored other problems (training ones among them)."""
    import rlxf.data
    from rlxf.trainer.evaluate import NoHeldOutPrompts, evaluate_saved_model

    drawn = []

    def build(data_cfg, tokenizer, seed):
        drawn.append(seed)
        return SimpleNamespace(test=[])

    monkeypatch.setattr(rlxf.data, "build_prompt_data", build)
    cfg = load_config(None, base={"model": {"path": str(nano_model_dir)}, "data": {"task": "arithmetic"},
                                  "run": {"seed": 1, "data_seed": 7}})
    with pytest.raises(NoHeldOutPrompts):
        evaluate_saved_model(nano_model_dir, cfg, 4)
    assert drawn == [7]
