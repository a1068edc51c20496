"""The demo's hidden preference and its data: answers in CAPITALS are better.

The SFT demonstrations answer "say N" with one to three words, half of them in capitals and half
in lower case, so the SFT model satisfies the rule about half the time. Nobody tells the later
stages the rule: a scripted labeller (``rule`` as an rlxf custom verifier) ranks the SFT model's
own samples, and the reward model and DPO learn from those rankings alone.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

WORDS = ["apple", "river", "green", "sun", "bread", "stone", "seven", "cold", "glass", "iron", "north", "paper"]


def rule(sample, **_) -> float:
    """1.0 when most letters of the response are capitals (the hidden rule), else 0.0."""
    letters = [c for c in sample.response if c.isalpha()]
    return float(bool(letters) and sum(c.isupper() for c in letters) > len(letters) / 2)


def _prompt(rng: random.Random) -> str:
    return f"say {rng.randint(0, 999)}"


def write_data(out: Path, seed: int = 0, n_sft: int = 2000, n_prompts: int = 512, n_test: int = 64) -> None:
    """sft.jsonl (prompt, response), prompts.jsonl and test_prompts.jsonl (prompt) under ``out``."""
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "sft.jsonl", "w") as f:
        for _ in range(n_sft):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
            f.write(json.dumps({"prompt": _prompt(rng), "response": words.upper() if rng.random() < 0.5 else words})
                    + "\n")
    for name, n in (("prompts", n_prompts), ("test_prompts", n_test)):
        with open(out / f"{name}.jsonl", "w") as f:
            for _ in range(n):
                f.write(json.dumps({"prompt": _prompt(rng)}) + "\n")
