"""PPO-ptx's demonstrations: batches of (prompt, response) examples in a fixed, resumable order.

    demos = build_demonstrations(cfg, tokenizer, held_out=data.held_out)   # None unless ptx_coef > 0
    batches = demos.next_batches(cfg.derived.optimizer_steps_per_step)     # one per optimizer step
    demos.state_dict() / demos.load_state_dict(state)                      # saved with each checkpoint

The examples are read as ``rlxf sft`` reads its data (``build_sft_data`` on ``data.ptx``, with
the run's templating and length limits); any whose prompt is one of the run's held-out prompts
is removed (counted in the log), so PPO-ptx never trains on what the evals measure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlxf.data.prompts import source_config, source_seed
from rlxf.data.sampler import PromptSampler
from rlxf.data.sft import SFTExample, build_sft_data

if TYPE_CHECKING:
    from rlxf.config import Config


class Demonstrations:
    """Batches of ``batch_size`` demonstrations, epoch after shuffled epoch (``PromptSampler``)."""

    def __init__(self, examples: list[SFTExample], batch_size: int, seed: int, shuffle: bool = True):
        self.batch_size = batch_size
        self.sampler = PromptSampler(examples, seed, shuffle, stream="ptx")

    def next_batches(self, k: int) -> list[list[SFTExample]]:
        """The next ``k`` batches. One per configured optimizer step of an RL step: a step with
        fewer (dynamic sampling kept fewer samples) leaves the rest unused, so the order stays a
        function of the step alone."""
        return [self.sampler.next_batch(self.batch_size) for _ in range(k)]

    def state_dict(self) -> dict[str, Any]:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampler.load_state_dict(state)


def build_demonstrations(cfg: Config, tokenizer, held_out: frozenset[str]) -> Demonstrations | None:
    """The run's PPO-ptx demonstrations, or None when ``algorithm.ptx_coef`` is 0."""
    ptx = cfg.data.ptx
    if cfg.algorithm.ptx_coef == 0 or ptx is None:
        return None
    seed = source_seed(ptx, cfg.seeds.data)
    data = build_sft_data(source_config(cfg.data, ptx), tokenizer, seed=seed, exclude=held_out)
    return Demonstrations(data.train, ptx.batch_size, seed=seed, shuffle=cfg.data.shuffle)
