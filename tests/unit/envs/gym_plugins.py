"""A Gymnasium text environment for the adapter test (needs gymnasium; imported only by that test)."""

from __future__ import annotations

import gymnasium
from gymnasium.spaces import Text


class SecretWord(gymnasium.Env):
    """Say the ground truth's word within ``tries`` turns (registered as rlxf_test/SecretWord-v0)."""

    metadata = {"render_modes": []}

    def __init__(self, tries: int = 2):
        self.observation_space = self.action_space = Text(64)
        self.tries = tries

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.secret, self.left = str((options or {}).get("ground_truth")), self.tries
        return "Say the word.", {}

    def step(self, action):
        self.left -= 1
        won = self.secret in action
        return ("Yes." if won else "No, again."), float(won), won, self.left == 0 and not won, {"success": won}
