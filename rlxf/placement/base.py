"""What the RL loop asks of wherever its roles run.

The loop (``rlxf.trainer.loop``) holds the data and the schedule; a placement holds the models,
the engine, the reward and the optimizers, and does the work of each phase:

    generate        prompts -> unscored trajectories (n per prompt), from the engine
    stream          the engine as a stream: submit prompts, take groups as they finish
                    (rollout.mode: async, where sampling runs ahead of training)
    score           trajectories -> rewards, per-verifier scores, correctness (filled in place)
    make_experience trajectories -> Experience (π_old, π_ref, V, token rewards, advantages)
    update          one RL step of the actor (and critic) on an Experience -> metrics
    sync_weights    the engines sample from the trained weights, tagged with a version
    save / load     models and optimizer state into / from a checkpoint directory
    close           release processes, actors, pools

The loop never touches a model, a weight tensor or an optimizer: everything it holds is data
(prompts, trajectories, an Experience, metrics). ``local`` implements this in one process;
a distributed placement implements the same methods with remote roles. The CLI picks the
placement from ``run.placement`` (``rlxf.placement.build``) and hands it to ``train``; the
trainer never imports a placement.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlxf.errors import close_all, close_during  # noqa: F401 - the placements' cleanup helpers
from rlxf.rollout import SamplingParams
from rlxf.rollout.stream import GroupStream, InlineStream
from rlxf.types import Experience, Prompt, Trajectory

if TYPE_CHECKING:
    from rlxf.data import SFTExample

log = logging.getLogger("rlxf")


class LearnerLost(RuntimeError):
    """The process holding the learner died: its optimizer state is gone, so the run must
    resume from a checkpoint (``rlxf train CONFIG --resume``)."""


class Placement(ABC):
    """The roles of one RL run, wherever they live. Use as a context manager (closes)."""

    #: The policy's tokenizer, for the driver to build prompts with (it holds no weights).
    tokenizer: Any

    @abstractmethod
    def generate(self, prompts: list[Prompt], seeds: list[int], sampling: SamplingParams, *,
                 first_group: int = 0) -> list[Trajectory]:
        """``sampling.n`` responses per prompt, unscored; prompt i's trajectories get
        ``group = first_group + i`` and are sampled with ``seeds[i]``."""

    @abstractmethod
    def score(self, trajs: list[Trajectory], max_new_tokens: int) -> dict[str, float]:
        """Fill in each trajectory's reward, scores, correctness and error; returns the
        batch's reward metrics (means, failures). ``max_new_tokens``: the length limit the
        responses were sampled under (for overlong shaping)."""

    def stream(self) -> GroupStream:
        """The engine as a stream of groups (``rollout.mode: async``; ``rlxf.rollout.stream``).
        By default an ``InlineStream`` over ``generate``: correct, but nothing overlaps; a
        placement whose engine can run on its own while the learner trains returns its own."""
        return InlineStream(self)

    @abstractmethod
    def make_experience(self, trajs: list[Trajectory]) -> tuple[Experience, dict[str, float]]:
        """The training batch of these scored trajectories, for the configured algorithm."""

    @abstractmethod
    def update(self, exp: Experience, step: int, demos: list[list[SFTExample]] | None = None,
               time_spent: float | None = None) -> dict[str, float]:
        """One RL step on ``exp`` (epochs x mini-batches of the actor, and the critic where
        there is one); returns the training and drift metrics (``skipped`` counts optimizer
        steps skipped for a non-finite loss or gradient). ``demos``: PPO-ptx demonstrations,
        one batch per optimizer step (``algorithm.ptx_coef`` > 0); the loop passes them only then.
        ``time_spent``: the fraction of ``train.max_seconds`` the run has trained before this
        update, which a cosine lr schedule follows where it ends before ``train.steps``; the loop
        passes it only to a run with a time budget."""

    @abstractmethod
    def sync_weights(self, version: int) -> None:
        """Make the engines sample from the actor's current weights, as policy ``version``."""

    @abstractmethod
    def save(self, directory: Path) -> None:
        """Write the models (HF format) and the roles' training state into ``directory``."""

    @abstractmethod
    def load(self, directory: Path) -> None:
        """Restore what ``save`` wrote (the engines are not synced: call ``sync_weights``)."""

    def stats(self) -> dict[str, float]:
        """Counters the loop logs with every step (e.g. actors restarted so far); none by default."""
        return {}

    @abstractmethod
    def close(self) -> None:
        """Release everything the roles hold open (worker processes, actors)."""

    def __enter__(self) -> Placement:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            self.close()
        else:  # the error that ended the block stays the one raised
            close_during(exc, self.close, "closing the placement")
