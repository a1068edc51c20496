"""benchmarks/efficacy.py's configs stay valid as the config schema moves, and ``--starts easier``
measures what it says: the SFT mixture's held-out ``task`` source is the very split GRPO and the
final evaluation read (the start rule and the table score the same problems), and neither
source trains on any of them, nor on the easier variant's held-out problems."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from rlxf.config import load_config
from rlxf.data.prompts import build_prompt_data, content_key
from rlxf.data.sft import build_sft_data
from rlxf.types import source_of

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))
from efficacy import TASKS, Result, _sft_task, _task_config, format_table  # noqa: E402

EASIER = [name for name, task in TASKS.items() if task.easier is not None]


def _small(cfg: dict) -> dict:
    """``cfg`` with a few training problems per source: the splits' rules do not depend on how many."""
    data = cfg["data"]
    for source in data.get("sources", [data]):
        source["train_size"] = 40
    return cfg


def _load(cfg: dict):
    return load_config(None, base={**cfg, "model": {"path": "base-model"}})   # a path the loader does not open


def _args(starts: str) -> argparse.Namespace:
    return argparse.Namespace(seed=0, eval_problems=30, starts=starts)


@pytest.mark.parametrize("name", list(TASKS))
def test_every_task_config_loads(name, tmp_path):
    pytest.importorskip("reasoning_gym")
    for cfg in (_task_config(name, 0, 30, tmp_path), _sft_task(name, _args("same"), tmp_path)):
        assert _load(cfg).data.task == f"reasoning_gym:{name}"


@pytest.mark.parametrize("name", EASIER)
def test_easier_starts_hold_out_the_tasks_own_problems(name, tmp_path, tokenizer_for_tests):
    pytest.importorskip("reasoning_gym")
    plain = _load(_small(_task_config(name, 0, 30, tmp_path)))
    mixed = _load(_small(_sft_task(name, _args("easier"), tmp_path)))
    assert [s.label for s in mixed.data.sources] == ["task", "easier"]

    rl_test = [p.prompt_ids for p in build_prompt_data(plain.data, tokenizer_for_tests, seed=0).test]
    sft = build_sft_data(mixed.data, tokenizer_for_tests, seed=0)
    task_test = [e for e in sft.test if source_of(e.uid) == "task"]
    assert [e.prompt_ids for e in task_test] == rl_test   # the same 30 problems, in order
    easier_test = {content_key(e.prompt_text) for e in sft.test if source_of(e.uid) == "easier"}
    assert len(easier_test) > 1

    held_out = {content_key(e.prompt_text) for e in sft.test}
    trained = {source_of(e.uid) for e in sft.train}
    assert trained == {"task", "easier"}
    assert not any(content_key(e.prompt_text) in held_out for e in sft.train)
    # the variant is another distribution: its held-out problems are not the task's
    assert easier_test - {content_key(e.prompt_text) for e in task_test}


def test_the_table_counts_the_problems_each_side_trained_on():
    """The table shows how many problems GRPO sampled and continued SFT trained on in their time
    (the comparison is one of wall time, and a GRPO problem costs more), and a dash for results
    written before the counts were kept, which load without them."""
    kept = Result("leg_counting", 100, 0.25, 0.36, 0.45, 312.0, 322.0, 366, {50: 0.3},
                  grpo_prompts=5856, sft_more_demos=8480)
    old = Result("gcd", 100, 0.50, 0.56, 0.52, 308.0, 317.0, 760, {50: 0.56})
    rows = {line.split()[0]: line for line in format_table([kept, old], "5 min of GRPO", []).splitlines()}
    assert "5,856 / 8,480" in rows["leg_counting"]
    assert "/" not in rows["gcd"].split("760", 1)[1] and " - " in rows["gcd"]
