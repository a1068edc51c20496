"""Review 17 of the preference pipeline: DPO's held-out metrics where the policy is π_ref, pairs
whose two conversations answer different prompts, and labelled pairs of one response."""

from __future__ import annotations

import json
import math

import pytest
import yaml

from rlxf.cli.main import main
from rlxf.config.data import DataConfig
from rlxf.data import build_preference_data
from rlxf.data.errors import DataError


def _jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _pairs(n: int, tag: str) -> list[dict]:
    return [{"prompt": f"{tag} {i}", "chosen": f"RIVER {i} STONE", "rejected": f"iron {i} bread green"}
            for i in range(n)]


def test_dpo_held_out_metrics_at_step_0_are_those_of_policy_equal_to_reference(tmp_path, nano_model_dir):
    # 3 train + 5 held-out pairs in micro-batches of 4: a reference computed over train + test
    # together groups the held-out pairs unlike evaluation does, and the packed forward's rounding
    # left h ~1e-6 off 0, so the step-0 accuracy was the sign of noise (e.g. 0.4), not 1/2
    cfg = {
        "run": {"name": "dpo", "output_dir": str(tmp_path / "runs"), "seed": 0},
        "model": {"path": str(nano_model_dir)},
        "data": {"source": "jsonl", "train_path": _jsonl(tmp_path / "train.jsonl", _pairs(3, "say")),
                 "test_path": _jsonl(tmp_path / "test.jsonl", _pairs(5, "tell")), "max_prompt_len": 32,
                 "fields": {"ground_truth": None}},
        "dpo": {"steps": 1, "batch_size": 4, "micro_batch_size": 4},
        "logging": {"progress": False},
    }
    (tmp_path / "dpo.yaml").write_text(yaml.safe_dump(cfg))
    assert main(["dpo", str(tmp_path / "dpo.yaml")]) == 0
    start = json.loads((tmp_path / "runs" / "dpo" / "metrics.jsonl").read_text().splitlines()[0])
    assert start["step"] == 0
    # h = 0 on every held-out pair, exactly: each is a tie (1/2), the margin 0, the loss log 2
    assert start["eval/dpo/reward_accuracy"] == 0.5
    assert start["eval/dpo/reward_margin"] == 0.0
    assert start["eval/dpo/loss"] == pytest.approx(math.log(2), abs=1e-7)


def _conv(question: str, answer: str) -> list[dict]:
    return [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]


def test_a_pair_whose_conversations_answer_different_prompts_is_refused(tmp_path, tokenizer_for_tests):
    # with a prompt field the conversations before the answers were never compared: the pair
    # trained on "1+1=" with answers to two other questions
    bad = [{"prompt": "1+1=", "chosen": _conv("2+2=", "4"), "rejected": _conv("3+3=", "5")}]
    cfg = DataConfig(source="jsonl", train_path=_jsonl(tmp_path / "bad.jsonl", bad))
    with pytest.raises(DataError, match=r"bad.jsonl:1: 'chosen' and 'rejected' have different conversations "
                                        r"before the answer, so they answer different prompts"):
        build_preference_data(cfg, tokenizer_for_tests, 0)
    # the same conversation before both answers (UltraFeedback's layout), or answers alone, are pairs
    good = [{"prompt": "2+2=", "chosen": _conv("2+2=", "4"), "rejected": _conv("2+2=", "5")},
            {"prompt": "2+3=", "chosen": [{"role": "assistant", "content": "5"}], "rejected": "6"}]
    cfg = DataConfig(source="jsonl", train_path=_jsonl(tmp_path / "good.jsonl", good))
    assert [(p.chosen_text, p.rejected_text) for p in build_preference_data(cfg, tokenizer_for_tests, 0).train] \
        == [("4", "5"), ("5", "6")]


def test_a_conversation_against_a_plain_answer_without_a_prompt_names_both_fields(tmp_path, tokenizer_for_tests):
    # was "different conversations before the answer" one way round and "'prompt' is missing" the other
    for chosen, rejected, conv, other in ((_conv("2+2=", "4"), "5", "chosen", "rejected"),
                                          ("4", _conv("2+2=", "5"), "rejected", "chosen")):
        path = _jsonl(tmp_path / "p.jsonl", [{"chosen": chosen, "rejected": rejected}])
        with pytest.raises(DataError, match=rf"p.jsonl:1: '{conv}' is a conversation with turns before the answer "
                                            rf"but '{other}' is not, and the record has no prompt field 'prompt'"):
            build_preference_data(DataConfig(source="jsonl", train_path=path), tokenizer_for_tests, 0)


def test_label_writes_no_pair_of_one_response_scored_two_ways():
    from rlxf.config.preference import LabelConfig
    from rlxf.config.reward import RewardConfig
    from rlxf.rollout import SamplingParams
    from rlxf.trainer.label import label_prompts
    from rlxf.types import Prompt, Trajectory

    # a sampling judge scores the same text 0.9 once and 0.2 once: best and worst are one response
    samples = {"0": [("same", 0.9), ("same", 0.2), ("same", 0.5)], "1": [("good", 0.8), ("bad", 0.1), ("good", 0.7)]}

    class Rollout:
        def generate(self, prompts, seeds, sampling, *, first_group=0):
            return [Trajectory(p, first_group + g, [1], text, [0.0], [1], [0], "stop", reward=score)
                    for g, p in enumerate(prompts) for text, score in samples[p.uid]]

        def score(self, trajs, max_new_tokens):
            return {}

    prompts = [Prompt(uid, [1, 2], f"prompt {uid}") for uid in samples]
    pairs, counts = label_prompts(Rollout(), prompts, SamplingParams(max_new_tokens=4), LabelConfig(k=3), seed=0,
                                  reward=RewardConfig())
    assert [(p["uid"], p["chosen"], p["rejected"]) for p in pairs] == [("1", "good", "bad")]
    assert (counts["pairs"], counts["ties"]) == (1.0, 1.0)


def test_label_stopped_part_way_keeps_the_pairs_of_its_finished_batches(tmp_path):
    from rlxf.config.preference import LabelConfig
    from rlxf.config.reward import RewardConfig
    from rlxf.rollout import SamplingParams
    from rlxf.trainer.collect import RewardFailures
    from rlxf.trainer.label import label_split
    from rlxf.types import Prompt, Trajectory

    # prompts 0 and 1 label fine; every reward of prompt 2 fails, over reward.max_error_frac
    class Rollout:
        def generate(self, prompts, seeds, sampling, *, first_group=0):
            return [Trajectory(p, first_group + g, [1], f"{p.uid}-{i}", [0.0], [1], [0], "stop", reward=float(i))
                    for g, p in enumerate(prompts) for i in range(sampling.n)]

        def score(self, trajs, max_new_tokens):
            for t in trajs:
                if t.prompt.uid == "2":
                    t.reward_error = "judge: error: TimeoutError"
            return {}

    def label(n: int):
        return label_split(Rollout(), tmp_path, "train", [Prompt(str(i), [1], f"p{i}") for i in range(n)],
                           SamplingParams(max_new_tokens=4), LabelConfig(k=2, batch_prompts=1), seed=0,
                           reward=RewardConfig(max_error_frac=0.5), run_start=True)

    with pytest.raises(RewardFailures, match="train prompts 2-2"):
        label(3)
    # before, every pair lived in memory until the split's end: all were lost (and the run
    # directory, holding nothing, deleted)
    kept = [json.loads(line) for line in (tmp_path / "pairs_train.partial.jsonl").read_text().splitlines()]
    assert [(p["uid"], p["chosen"], p["rejected"]) for p in kept] == [("0", "0-1", "0-0"), ("1", "1-1", "1-0")]
    assert not (tmp_path / "pairs_train.jsonl").exists()   # no reader takes it for the whole split
    assert label(2)["pairs"] == 2.0
    assert len((tmp_path / "pairs_train.jsonl").read_text().splitlines()) == 2
    assert not (tmp_path / "pairs_train.partial.jsonl").exists()
