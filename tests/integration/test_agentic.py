"""Multi-turn RL end to end on the nano model: episodes through the local placement have exact
masks, and GRPO over a user's environment trains (weights move, samples.jsonl shows episodes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from rl_helpers import metrics, write_config
from safetensors.torch import load_file

from rlxf.cli.main import main
from rlxf.config import load_config
from rlxf.data import build_prompt_data
from rlxf.envs.tokens import encode_text
from rlxf.placement.local import LocalPlacement
from rlxf.rollout import SamplingParams


def segments(mask):
    """(start, end, value) runs of a 0/1 mask."""
    out, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            out.append((start, i, mask[start]))
            start = i
    return out


def test_guess_number_episodes_have_exact_masks(tmp_path, nano_model_dir):
    path = write_config(tmp_path, nano_model_dir, data={"task": "guess_number", "task_options": {"low": 1, "high": 8},
                                                        "train_size": 16, "test_size": 4},
                        env={"name": "guess_number", "options": {"low": 1, "high": 8}, "max_turns": 3,
                             "max_total_tokens": 96})
    cfg = load_config(path)
    with LocalPlacement.from_config(cfg) as placement:
        tok = placement.tokenizer
        data = build_prompt_data(cfg.data, tok, seed=0)
        trajs = placement.generate(data.train[:3], [1, 2, 3], SamplingParams(n=2, max_new_tokens=6, seed=0))
        placement.score(trajs, 6)
    assert len(trajs) == 6
    for t in trajs:
        ep = t.episode
        assert ep["error"] is None and 1 <= ep["turns"] <= 3
        runs = segments(t.loss_mask)
        model_runs = [(a, b) for a, b, v in runs if v == 1]
        assistant = [m["content"] for m in ep["messages"] if m["role"] == "assistant"]
        assert len(model_runs) == ep["turns"] == len(assistant)
        ids = t.response_ids
        for (a, b), text in zip(model_runs, assistant):   # model runs: the engine's tokens of each turn
            assert tok.decode(ids[a:b], skip_special_tokens=True) == text
            assert set(t.policy_versions[a:b]) == {0} and all(lp < 0 for lp in t.rollout_logprobs[a:b])
        hints = [m["content"] for m in ep["messages"][2:] if m["role"] == "user"]
        env_runs = [(a, b) for a, b, v in runs if v == 0]
        assert len(env_runs) == len(hints)
        for (a, b), hint in zip(env_runs, hints):         # env runs: the template's text around each hint
            assert f"<|im_start|>user\n{hint}<|im_end|>\n<|im_start|>assistant\n" in tok.decode(ids[a:b])
            assert ids[b - len(encode_text(tok, "<|im_start|>assistant\n")):b] == encode_text(tok, "<|im_start|>assistant\n")
        assert t.correct is not None and t.reward in (0.0, 1.0)


def test_grpo_on_a_user_environment_trains(tmp_path, nano_model_dir):
    path = write_config(tmp_path, nano_model_dir,
                        env={"name": "agentic_plugins:DigitsEnv", "max_turns": 2, "max_total_tokens": 96,
                             "credit": "per_turn", "use_verifiers": True},
                        rollout={"n": 4, "max_new_tokens": 6},
                        train={"steps": 3, "prompts_per_step": 2, "micro_batch_size": 8, "optim": {"lr": 1e-2}},
                        eval={"every": 3, "num_problems": 4}, checkpoint={"every": 0},
                        logging={"samples_fraction": 1.0})
    assert main(["train", str(path)]) == 0
    run = tmp_path / "runs" / "t"
    m = metrics(run)
    assert len(m) == 3 and all(x["env/episode_errors"] == 0 for x in m)
    # how episodes ended, each step: DigitsEnv ends every one itself, within the turn and token limits
    assert all((x["env/end/terminated"], x["env/end/truncated"], x["env/end/max_turns"],
                x["env/end/max_total_tokens"], x["env/end/error"]) == (1.0, 0.0, 0.0, 0.0, 0.0) for x in m)
    assert "eval/accuracy" in m[-1] and "reward/upper" in m[-1]
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert samples and all(s["episode"]["turns"] == 2 and len(s["episode"]["turn_rewards"]) == 2 for s in samples)
    trained = load_file(run / "checkpoints" / "step_3" / "model" / "model.safetensors")
    base = load_file(nano_model_dir / "model.safetensors")
    assert any(not torch.equal(trained[k], base[k]) for k in trained)


EXAMPLES = sorted((Path(__file__).parents[2] / "examples" / "agentic").glob("*.yaml"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_agentic_example_smoke(example, tmp_path, nano_model_dir):
    overrides = [f"model.path={nano_model_dir}", f"run.output_dir={tmp_path}", "train.steps=2",
                 "train.prompts_per_step=2", "train.micro_batch_size=4", "data.train_size=64",
                 "data.test_size=4", "eval.every=2", "eval.num_problems=2", "checkpoint.every=0",
                 "logging.progress=false", "rollout.max_new_tokens=6", "env.max_turns=2"]
    assert main(["train", str(example), *overrides]) == 0
    records = metrics(tmp_path / load_config(example).run.name)
    assert [r["step"] for r in records] == [1, 2]
    assert all(r["env/episode_errors"] == 0 for r in records) and "eval/accuracy" in records[-1]


def test_a_step_whose_every_episode_failed_stops_the_run_naming_the_error(tmp_path, nano_model_dir, capsys):
    """An environment that fails every episode trained on nothing and exited 0; the first step in
    which no episode ended well now stops the run with the first episode's error."""
    path = write_config(tmp_path, nano_model_dir,
                        env={"name": "agentic_plugins:AlwaysBrokenEnv", "max_turns": 2, "max_total_tokens": 96},
                        rollout={"n": 2, "max_new_tokens": 4},
                        train={"steps": 3, "prompts_per_step": 2, "micro_batch_size": 8}, checkpoint={"every": 0})
    assert main(["train", str(path)]) == 1
    err = capsys.readouterr().err
    assert "every one of its 4 episodes ended in an error" in err and "undefined_helper" in err and "env.name" in err


def test_broken_episodes_never_stop_the_run(tmp_path, nano_model_dir):
    """Episodes failing in reset (no response tokens at all), in step, or with garbage train along
    with the healthy ones: the run finishes, the errors are counted and written to samples.jsonl."""
    path = write_config(tmp_path, nano_model_dir,
                        env={"name": "agentic_plugins:BrokenEnv", "max_turns": 2, "max_total_tokens": 96},
                        rollout={"n": 4, "max_new_tokens": 4},
                        train={"steps": 2, "prompts_per_step": 2, "micro_batch_size": 8},
                        checkpoint={"every": 0}, logging={"samples_fraction": 1.0})
    assert main(["train", str(path)]) == 0
    run = tmp_path / "runs" / "t"
    errors = sum(m["env/episode_errors"] for m in metrics(run))
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    failed = [s for s in samples if s["episode"]["error"]]
    assert errors == len(failed) > 0 and len(failed) < len(samples)
    assert {s["finish_reason"] for s in failed} == {"error"}
    texts = [s["episode"]["error"] for s in failed]
    assert any(t.startswith("reset: RuntimeError") for t in texts)     # no tokens at all, still trained past
    assert any("step broke" in t for t in texts) and any("must return rlxf.envs.StepResult" in t for t in texts)
