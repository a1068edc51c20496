"""Held-out evaluation per source: greedy accuracy, pass@k and mean@k of each source of a mixture."""

from __future__ import annotations

from types import SimpleNamespace

from rlxf.rollout import SamplingParams
from rlxf.trainer.evaluate import evaluate_rollout


class ScriptedRollout:
    """Greedy answers right on the prompts in ``greedy``; sampled groups solve the prompts in ``sampled``."""

    def __init__(self, greedy: set[int], sampled: set[int]):
        self.greedy, self.sampled = greedy, sampled

    def generate(self, prompts, seeds, sampling, first_group: int = 0):
        right = self.greedy if sampling.temperature == 0 else self.sampled
        return [SimpleNamespace(group=i, prompt=p, correct=i in right and j == 0, reward=0.0, response_ids=[1],
                                reward_error=None)
                for i, p in enumerate(prompts) for j in range(sampling.n)]

    def score(self, trajs, max_new_tokens):
        pass


def test_pass_at_k_per_source():
    prompts = [SimpleNamespace(uid=f"{s}:test:{i}") for s in ("easy", "hard") for i in range(4)]
    # greedy: 3 easy right, 1 hard; sampling: every easy prompt and 2 of the 4 hard ones solved
    rollout = ScriptedRollout(greedy={0, 1, 2, 4}, sampled={0, 1, 2, 3, 5, 6})
    out = evaluate_rollout(rollout, prompts, SamplingParams(n=1, temperature=1.0, max_new_tokens=4), pass_k=4)
    assert out["eval/easy/accuracy"] == 0.75 and out["eval/hard/accuracy"] == 0.25
    assert out["eval/pass@k"] == 6 / 8
    assert out["eval/easy/pass@k"] == 1.0 and out["eval/hard/pass@k"] == 0.5
    # one sample of the 4 right on each solved prompt: 6 right of 32, 4 of 16 easy, 2 of 16 hard
    assert out["eval/mean@k"] == 6 / 32
    assert out["eval/easy/mean@k"] == 4 / 16 and out["eval/hard/mean@k"] == 2 / 16
