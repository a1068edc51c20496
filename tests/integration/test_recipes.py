"""The real-model recipes (examples/recipes/): each passes `rlxf explain` as shipped, its batch
arithmetic is what the README says, and each runs two steps as a user would smoke-test it here:
`model.path` swapped for a local preset model and the data for the local sample in the same
format, with command-line overrides."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from rlxf.cli.main import main
from rlxf.config import load_config

RECIPES_DIR = Path(__file__).parents[2] / "examples" / "recipes"
RECIPES = sorted(RECIPES_DIR.glob("*.yaml"))
DATA = RECIPES_DIR / "data"
SAMPLES = {"gsm8k": ("gsm8k_train_sample.jsonl", "gsm8k_test_sample.jsonl"),
           "code": ("code_train_sample.jsonl", "code_test_sample.jsonl")}


def _kind(recipe: Path) -> str:
    return "code" if "_code_" in recipe.name else "gsm8k"


def _sandbox_or_skip() -> None:
    if sys.platform != "linux":
        pytest.skip("the sandbox is Linux-only")
    from rlxf.rewards.sandbox import Sandbox, SandboxLimits, SandboxUnavailable

    try:
        Sandbox(SandboxLimits(cpu_s=1, wall_s=15), concurrency=1).close()
    except SandboxUnavailable as e:
        pytest.skip(str(e))


def test_there_is_a_cpu_and_a_gpu_recipe_for_math_and_for_code():
    assert {(_kind(p), load_config(p).model.device) for p in RECIPES} == {
        ("gsm8k", "cpu"), ("gsm8k", "cuda"), ("code", "cpu"), ("code", "cuda")}
    assert {load_config(p).model.path for p in RECIPES} == {"Qwen/Qwen2.5-0.5B-Instruct"}


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.stem for p in RECIPES])
def test_recipe_passes_explain(recipe, monkeypatch, capsys):
    """As shipped: the hub model cannot be read here (offline), so explain skips the memory
    estimate and says why, but the config must load and its batch arithmetic print."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # no network retries
    assert main(["explain", str(recipe)]) == 0
    out = capsys.readouterr().out
    d = load_config(recipe).derived
    assert re.search(rf"samples per step\s*│\s*{d.samples_per_step}\s", out)
    assert re.search(rf"optimizer steps per RL step\s*│\s*{d.optimizer_steps_per_step}\s", out)


def _readme_rows() -> dict[str, list[str]]:
    """The README's batch-arithmetic table: recipe file name -> its cells."""
    rows = {}
    for line in (RECIPES_DIR / "README.md").read_text().splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip().strip("`") for c in line.strip().strip("|").split("|")]
        if re.fullmatch(r"[\w.\-]+\.yaml", cells[0]):
            rows[cells[0]] = cells[1:]
    return rows


def test_readme_batch_arithmetic_is_the_configs():
    rows = _readme_rows()
    assert set(rows) == {p.name for p in RECIPES}
    for recipe in RECIPES:
        cfg = load_config(recipe)
        d = cfg.derived
        expected = [cfg.train.prompts_per_step, cfg.rollout.n, d.samples_per_step, d.mini_batch_size,
                    d.micro_batch_size, d.grad_accum_steps, d.optimizer_steps_per_step, d.max_tokens_per_sample,
                    d.max_tokens_per_step]
        assert [int(c.replace(",", "")) for c in rows[recipe.name][:len(expected)]] == expected, recipe.name


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.stem for p in RECIPES])
def test_recipe_runs_two_steps_on_a_local_model_and_sample(recipe, tmp_path, nano_model_dir):
    kind = _kind(recipe)
    if kind == "code":
        _sandbox_or_skip()
    train, test = SAMPLES[kind]
    overrides = [
        f"model.path={nano_model_dir}", "model.device=cpu", "model.dtype=float32",
        "data.source=jsonl", f"data.train_path={DATA / train}", f"data.test_path={DATA / test}",
        f"run.output_dir={tmp_path}", "train.steps=2", "train.prompts_per_step=2", "rollout.n=4",
        "train.mini_batch_size=4", "train.micro_batch_size=2", "rollout.max_new_tokens=8", "eval.at_start=false",
        "eval.every=2", "eval.num_problems=2", "checkpoint.every=0", "logging.progress=false",
    ]
    assert main(["train", str(recipe), *overrides]) == 0
    run = tmp_path / load_config(recipe).run.name
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["step"] > 0] == [1, 2]
    assert all(r.get("skipped", 0) == 0 for r in records)
    assert "eval/accuracy" in records[-1]
    assert (run / "checkpoints" / "step_2" / "model" / "model.safetensors").exists()


def test_gsm8k_sample_answers_are_read_after_the_marker():
    """The math verifier as the recipes configure it scores each sample's own final answer 1."""
    from rlxf.rewards import LocalReward, RewardInput

    reward = LocalReward(load_config(RECIPES_DIR / "qwen2.5-0.5b_gsm8k_cpu.yaml").reward)
    with reward:
        for name in SAMPLES["gsm8k"]:
            for line in (DATA / name).read_text().splitlines():
                row = json.loads(line)
                final = row["answer"].rsplit("####", 1)[1].strip()
                inputs = [RewardInput(row["question"], f"so \\boxed{{{final}}}", row["answer"]),
                          RewardInput(row["question"], "so \\boxed{-1}", row["answer"])]
                assert [s.reward for s in reward.score(inputs)] == [1.0, 0.0], row["question"]


def test_code_samples_and_converter_output_pass_their_own_tests():
    """Every sample's reference solution passes its tests in the sandbox, as the recipes'
    verifier runs them; so do MBPP- and HumanEval-shaped rows through the converter."""
    _sandbox_or_skip()
    sys.path.insert(0, str(RECIPES_DIR))
    try:
        from make_code_data import humaneval_problem, mbpp_problem
    finally:
        sys.path.remove(str(RECIPES_DIR))
    from rlxf.rewards import RewardInput
    from rlxf.rewards.code import CodeVerifier
    from rlxf.rewards.sandbox import Sandbox, SandboxLimits

    rows = [json.loads(line) for name in SAMPLES["code"] for line in (DATA / name).read_text().splitlines()]
    rows.append(mbpp_problem({"task_id": 9, "text": "Write a function to add two numbers.",
                              "code": "def add(a, b):\n    return math.fsum([a, b])",
                              "test_list": ["assert add(1, 2) == 3"], "test_setup_code": "import math"}))
    rows.append(humaneval_problem({"task_id": "HumanEval/x", "entry_point": "double",
                                   "prompt": 'def double(x):\n    """Twice x."""\n',
                                   "canonical_solution": "    return 2 * x\n",
                                   "test": "def check(candidate):\n    assert candidate(3) == 6\n"}))
    verifier = CodeVerifier("tests", Sandbox(SandboxLimits(cpu_s=2, wall_s=25), concurrency=2))
    try:
        for row in rows:
            right = f"```python\n{row['solution']}\n```"
            assert verifier.score(RewardInput(row["prompt"], right, row["tests"])).score == 1.0, row["task_id"]
            wrong = "```python\nprint('no function here')\n```"
            assert verifier.score(RewardInput(row["prompt"], wrong, row["tests"])).score == 0.0, row["task_id"]
    finally:
        verifier.close()
