"""`rlxf label`: a response cut at max_new_tokens is never the chosen one of a pair, and a
labelling stopped or killed part way resumes to the files an uninterrupted one writes."""

from __future__ import annotations

import json

import pytest

from rlxf.config.preference import LabelConfig
from rlxf.config.reward import RewardConfig
from rlxf.errors import UserInputError
from rlxf.rollout import SamplingParams
from rlxf.trainer.label import label_prompts, label_split
from rlxf.types import Prompt, Trajectory

# per prompt: (response, finish reason, score)
CUT = [
    [("whole-good", "stop", 0.9), ("cut-best", "length", 1.0), ("whole-bad", "stop", 0.1)],
    [("cut-hi", "length", 0.8), ("whole-lo", "stop", 0.2), ("cut-lo", "length", 0.0)],
    [("cut-a", "length", 0.9), ("cut-b", "length", 0.1)],          # nothing finished: no pair
    [("whole", "stop", 0.0), ("cut-c", "length", 0.5)],            # only a cut one is better: no pair
]


class CutRollout:
    def generate(self, prompts, seeds, sampling, *, first_group=0):
        return [Trajectory(p, first_group + g, [1], text, [0.0], [1], [0], finish, reward=score)
                for g, p in enumerate(prompts) for text, finish, score in CUT[int(p.uid)]]

    def score(self, trajs, max_new_tokens):
        return {}


def test_a_response_cut_at_max_new_tokens_is_never_chosen_only_rejected():
    pairs, counts = label_prompts(CutRollout(), [Prompt(str(i), [1], f"p{i}") for i in range(4)],
                                  SamplingParams(max_new_tokens=4), LabelConfig(k=3), seed=0, reward=RewardConfig())
    # before: "cut-best" (an unfinished answer, given an eos by the pairs reader) was chosen for prompt 0,
    # "cut-hi" for 1, "cut-a" for 2 and "cut-c" over "whole" for 3
    assert [(p["uid"], p["chosen"], p["rejected"]) for p in pairs] == [("0", "whole-good", "whole-bad"),
                                                                       ("1", "whole-lo", "cut-lo")]
    assert (counts["truncated"], counts["truncated_unpaired"], counts["pairs"]) == (6.0, 2.0, 2.0)
    assert counts["gap_mean"] == pytest.approx((0.8 + 0.2) / 2)


class Stop(Exception):
    """The labelling is killed while generating this batch."""


class SeededRollout:
    """Responses drawn from each prompt's seed (as an engine's are); ``stop_at``: the prompt whose
    batch is killed; every generated prompt is recorded."""

    def __init__(self, stop_at: int | None = None):
        self.stop_at, self.seen = stop_at, []

    def generate(self, prompts, seeds, sampling, *, first_group=0):
        if self.stop_at is not None and any(int(p.uid) == self.stop_at for p in prompts):
            raise Stop
        self.seen += [p.uid for p in prompts]
        return [Trajectory(p, first_group + g, [1], f"{p.uid}/{s % 97}/{i}", [0.0], [1], [0],
                           "length" if (s + i) % 5 == 0 else "stop", reward=float((s * (i + 3)) % 11))
                for g, (p, s) in enumerate(zip(prompts, seeds)) for i in range(sampling.n)]

    def score(self, trajs, max_new_tokens):
        return {}


PROMPTS = [Prompt(str(i), [1], f"p{i}") for i in range(10)]


def _label(rollout, run, *, resume=False, prompts=PROMPTS):
    return label_split(rollout, run, "train", prompts, SamplingParams(max_new_tokens=4),
                       LabelConfig(k=3, batch_prompts=3), seed=7, reward=RewardConfig(), run_start=True,
                       resume=resume)


def test_a_stopped_labelling_resumes_to_the_same_pairs_and_counts(tmp_path):
    whole = tmp_path / "whole"
    whole.mkdir()
    counts = _label(SeededRollout(), whole)
    assert counts["pairs"] >= 4

    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(Stop):
        _label(SeededRollout(stop_at=7), run)        # batches 0-2 and 3-5 done, 6-8 killed
    assert len((run / "label_progress_train.jsonl").read_text().splitlines()) == 2
    again = SeededRollout()
    assert _label(again, run, resume=True) == counts
    assert again.seen == [str(i) for i in range(6, 10)]   # the finished batches are not labelled again
    assert (run / "pairs_train.jsonl").read_bytes() == (whole / "pairs_train.jsonl").read_bytes()
    assert not (run / "pairs_train.partial.jsonl").exists()
    # a resume of a finished split labels nothing and says the same
    done = SeededRollout()
    assert _label(done, run, resume=True) == counts and done.seen == []
    assert (run / "pairs_train.jsonl").read_bytes() == (whole / "pairs_train.jsonl").read_bytes()


def test_a_kill_mid_write_leaves_torn_lines_that_resume_cuts_off(tmp_path):
    whole = tmp_path / "whole"
    whole.mkdir()
    counts = _label(SeededRollout(), whole)
    run = tmp_path / "run"
    run.mkdir()
    with pytest.raises(Stop):
        _label(SeededRollout(stop_at=4), run)        # batch 0-2 done
    # killed while the next batch wrote: one whole pair and half of another past the last record,
    # and half of its progress line
    with open(run / "pairs_train.partial.jsonl", "a") as f:
        f.write(json.dumps({"prompt": "p3", "chosen": "x", "rejected": "y"}) + '\n{"prompt": "p4", "cho')
    with open(run / "label_progress_train.jsonl", "a") as f:
        f.write('{"next": 6, "pairs": 4')
    assert _label(SeededRollout(), run, resume=True) == counts
    assert (run / "pairs_train.jsonl").read_bytes() == (whole / "pairs_train.jsonl").read_bytes()
    lines = (run / "label_progress_train.jsonl").read_text().splitlines()
    assert len(lines) == 4 and all(json.loads(line)["uid"] for line in lines)


def test_a_resume_refuses_prompts_that_are_not_the_ones_labelled(tmp_path):
    with pytest.raises(Stop):
        _label(SeededRollout(stop_at=7), tmp_path)
    other = [Prompt(f"x{i}", [1], f"q{i}") for i in range(10)]
    with pytest.raises(UserInputError, match=r"label_progress_train\.jsonl records train prompts 0-5 labelled, the "
                                             r"last '5', but .* prompt 5 is 'x5'; the data changed"):
        _label(SeededRollout(), tmp_path, resume=True, prompts=other)


def test_a_resume_refuses_a_pairs_file_shorter_than_recorded(tmp_path):
    with pytest.raises(Stop):
        _label(SeededRollout(stop_at=7), tmp_path)
    (tmp_path / "pairs_train.partial.jsonl").write_text("")
    with pytest.raises(UserInputError, match=r"records \d+ bytes of train pairs but .*pairs_train\.partial\.jsonl "
                                             r"has 0"):
        _label(SeededRollout(), tmp_path, resume=True)


def test_a_prompt_the_engine_failed_on_is_counted_not_lost():
    class Rollout(CutRollout):
        def generate(self, prompts, seeds, sampling, *, first_group=0):   # prompt 1 too long for the model
            return [t for t in super().generate(prompts, seeds, sampling) if t.prompt.uid != "1"]

    pairs, counts = label_prompts(Rollout(), [Prompt(str(i), [1], f"p{i}") for i in range(2)],
                                  SamplingParams(max_new_tokens=4), LabelConfig(k=3), seed=0, reward=RewardConfig())
    # before, prompt 1 was in no count: pairs + ties + unscored + truncated_unpaired fell short of the prompts
    assert (counts["prompts"], counts["pairs"], counts["unscored"]) == (2.0, 1.0, 1.0)
