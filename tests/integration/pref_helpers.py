"""A synthetic preference whose truth we know, and configs for `rlxf rm` / `rlxf dpo` on it.

The hidden rule: a response in capitals beats one in lower case, whatever the prompt and the
words. It is dense (a capital letter anywhere helps), so a tiny policy can also be pushed towards
it by RL. Held-out pairs use prompts and word combinations never seen in training.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import yaml

WORDS = ["apple", "river", "green", "sun", "bread", "stone", "seven", "cold", "glass", "iron", "north", "paper"]


def write_pairs(path: Path, n: int, seed: int, avoid: Path | None = None) -> Path:
    """``n`` pairs; with ``avoid`` (another pairs file), none with one of its prompts."""
    seen = {json.loads(line)["prompt"] for line in avoid.read_text().splitlines()} if avoid else set()
    rng = random.Random(seed)
    with open(path, "w") as f:
        for i in range(n):
            prompt = f"say {rng.randint(0, 999)}"
            while prompt in seen:
                prompt = f"say {rng.randint(0, 999)}"
            chosen = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3))).upper()
            rejected = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
            f.write(json.dumps({"prompt": prompt, "chosen": chosen, "rejected": rejected, "id": i}) + "\n")
    return path


def pair_config(tmp_path: Path, model_dir: Path, kind: str, section: dict, *, name: str | None = None,
                n_train: int = 96, n_test: int = 32, **extra) -> Path:
    """A config file for ``kind`` ("rm" / "dpo") on the synthetic pairs; returns its path."""
    train = write_pairs(tmp_path / "train.jsonl", n_train, seed=0)
    test = write_pairs(tmp_path / "test.jsonl", n_test, seed=1, avoid=train)   # held-out prompts are never trained on
    cfg = {
        "run": {"name": name or kind, "output_dir": str(tmp_path / "runs"), "seed": 0},
        "model": {"path": str(model_dir)},
        "data": {"source": "jsonl", "train_path": str(train), "test_path": str(test), "max_prompt_len": 32,
                 "fields": {"ground_truth": None}},
        kind: section,
        "logging": {"progress": False},
        **extra,
    }
    path = tmp_path / f"{name or kind}.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def read_metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
