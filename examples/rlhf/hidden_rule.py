"""The demo's hidden preference and its data: answers in CAPITALS are better.

The SFT demonstrations answer "say N" with one to three words, half of them in capitals and half
in lower case, so the SFT model satisfies the rule about half the time. Nobody tells the later
stages the rule: a scripted labeller (``rule`` as an rlxf custom verifier) ranks the SFT model's
own samples, and the reward model and DPO learn from those rankings alone.

``write_data(..., cue_rate=p)`` adds a spurious feature for the reward-hacking experiment
(``hacking.py``): a demonstration that obeys the rule ends with " !" with probability p, one
that does not with probability 1 - p. The labeller never looks at it, but in the pairs it
labels "!" and capitals go together, and a reward model trained on few of them cannot tell
which one the labeller meant.
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


def cue(sample, **_) -> float:
    """1.0 when the response ends with "!" (the spurious feature), else 0.0."""
    return float(sample.response.rstrip().endswith("!"))


def letters(sample, **_) -> float:
    """The number of letters in the response (a response with none cannot obey the rule)."""
    return float(sum(c.isalpha() for c in sample.response))


def in_words(response: str) -> bool:
    """Whether the response is made of the demonstrations' words (any case, "!" aside): what an
    answer is meant to look like, which the rule (capitals) does not check."""
    words = [w for w in response.split() if w != "!"]
    return bool(words) and all(w.lower() in WORDS for w in words)


def _prompt(rng: random.Random) -> str:
    return f"say {rng.randint(0, 999)}"


def write_data(out: Path, seed: int = 0, n_sft: int = 2000, n_prompts: int = 512, n_test: int = 64,
               cue_rate: float | None = None) -> None:
    """sft.jsonl (prompt, response), prompts.jsonl and test_prompts.jsonl (prompt) under ``out``;
    with ``cue_rate``, the " !" cue as the module doc says."""
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "sft.jsonl", "w") as f:
        for _ in range(n_sft):
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 3)))
            prompt = _prompt(rng)
            capitals = rng.random() < 0.5
            response = words.upper() if capitals else words
            if cue_rate is not None and rng.random() < (cue_rate if capitals else 1 - cue_rate):
                response += " !"
            f.write(json.dumps({"prompt": prompt, "response": response}) + "\n")
    for name, n in (("prompts", n_prompts), ("test_prompts", n_test)):
        with open(out / f"{name}.jsonl", "w") as f:
            for _ in range(n):
                f.write(json.dumps({"prompt": _prompt(rng)}) + "\n")
