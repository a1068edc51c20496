"""The agentic examples as a user runs them: each config of examples/agentic/ trains a step on the
nano model, and examples/agentic/calculator_agent.py plays a whole tool episode through the endpoint
(what it sends: an assistant turn resent with OpenAI `tool_calls`, then `tool` messages by call id)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from rl_helpers import metrics
from test_agent_programs import ToolCaller  # a policy that calls the calculator, then answers

from rlxf.cli.main import main
from rlxf.config import load_config
from rlxf.envs.agent import EpisodeLimits
from rlxf.envs.programs import ProgramEpisodes
from rlxf.rollout import SamplingParams
from rlxf.types import Prompt

pytest.importorskip("openai")

AGENTIC = Path(__file__).parents[2] / "examples" / "agentic"
CONFIGS = sorted(AGENTIC.glob("*.yaml"))


@pytest.mark.parametrize("example", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_agentic_example_trains_a_step(example, tmp_path, nano_model_dir):
    overrides = [f"model.path={nano_model_dir}", f"run.output_dir={tmp_path}", "train.steps=1",
                 "train.prompts_per_step=2", "rollout.n=2", "train.micro_batch_size=4", "data.train_size=16",
                 "data.test_size=2", "eval.every=0", "checkpoint.every=0", "logging.progress=false",
                 "rollout.max_new_tokens=4"]
    assert main(["train", str(example), *overrides]) == 0
    [record] = metrics(tmp_path / load_config(example).run.name)
    assert record["env/episode_errors"] == 0 and record["env/end/error"] == 0


def test_calculator_agent_example_plays_a_tool_episode(tokenizer_for_tests):
    spec = importlib.util.spec_from_file_location("calculator_agent", AGENTIC / "calculator_agent.py")
    agent = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agent)
    tok = tokenizer_for_tests
    programs = ProgramEpisodes(agent.run, ToolCaller(tok), tok, EpisodeLimits(max_turns=3, max_total_tokens=1024),
                               timeout_s=60)
    prompt = Prompt(uid="arithmetic:0", prompt_ids=[1], prompt_text="123*456=", ground_truth="56088",
                    metadata={"question": "123*456="})
    try:
        [t] = programs.run([prompt], [0], SamplingParams(n=1, max_new_tokens=64))
    finally:
        programs.close()
    ep = t.episode
    assert ep["error"] is None, ep["error"]
    assert t.reward == 1.0 and ep["turns"] == 2
    assert [m["role"] for m in ep["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert ep["messages"][3]["content"] == "56088"
