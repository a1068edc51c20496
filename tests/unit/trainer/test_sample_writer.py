"""samples.jsonl keeps a bounded copy of an episode's final observation."""

from __future__ import annotations

import json

from rlxf.trainer.state import STORED_OBSERVATION_CHARS, SampleWriter
from rlxf.types import Prompt, Trajectory


def test_a_huge_final_observation_is_cut_in_samples_jsonl_and_left_whole_on_the_trajectory(tmp_path):
    huge = "x" * (STORED_OBSERVATION_CHARS + 123)
    episode = {"turns": 1, "end": "max_total_tokens",
               "final_observation": [{"role": "tool", "content": huge}, {"role": "user", "content": "short"}]}
    t = Trajectory(prompt=Prompt(uid="u", prompt_ids=[1], prompt_text="p"), group=0, response_ids=[2],
                   response_text="r", rollout_logprobs=[0.0], loss_mask=[1], policy_versions=[0],
                   finish_reason="length", episode=episode)
    writer = SampleWriter(tmp_path / "samples.jsonl", fraction=1.0, seed=0)
    writer.write(1, [t])
    writer.close()
    kept = json.loads((tmp_path / "samples.jsonl").read_text())["episode"]["final_observation"]
    assert kept[0]["content"] == "x" * STORED_OBSERVATION_CHARS + "... [123 more characters not kept]"
    assert kept[1] == {"role": "user", "content": "short"}
    assert t.episode["final_observation"][0]["content"] == huge   # what the run holds is not changed
