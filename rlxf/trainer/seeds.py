"""Seeds derived from integers, so every random choice is reproducible across restarts."""

from __future__ import annotations

import numpy as np


def derive_seed(*parts: int) -> int:
    """A 63-bit seed from integers (run seed, step, round, index, ...): stable, well mixed."""
    words = [int(p) & 0xFFFFFFFF for p in parts]
    return int(np.random.SeedSequence(words).generate_state(1, np.uint64)[0] >> np.uint64(1))
