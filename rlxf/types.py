"""The typed records that flow through an RL step.

    Prompt ──engine──▶ Completion ──reward──▶ Trajectory ──experience──▶ Experience ──▶ losses

Lists are per-token Python lists (ragged, one per sequence); tensors are padded to the
longest response in the batch and say their shape: B = sequences, T = response tokens.
Math notation follows the PPO / GRPO papers: a_t is the t-th response token, s_t the
prompt plus a_<t, π the policy being trained, π_old the policy that produced the data,
π_ref the frozen reference policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch

FinishReason = Literal["stop", "stop_string", "length", "error"]


def source_of(uid: str) -> str:
    """The source a prompt came from: its uid's first part (``<source>:<split>:<index>``)."""
    return uid.split(":", 1)[0]


@dataclass
class Prompt:
    """One prompt, templated and tokenized, with what its verifier needs.

    ``prompt_ids`` are the exact ids the engine generates from and the trainer trains on
    (token-in, token-out: nothing is re-tokenized downstream).
    """

    uid: str                      # stable id: "<source>:<split>:<index>"
    prompt_ids: list[int]         # (P,) token ids after the chat template
    prompt_text: str              # the templated text the ids came from (logs, judges)
    ground_truth: Any = None      # answer / test cases / rubric, passed to verifiers
    metadata: dict[str, Any] = field(default_factory=dict)  # any other fields, passed through
    question: str | None = None   # the prompt before the chat template (the text of its last user message)


@dataclass
class Completion:
    """One sampled response from a rollout engine.

    ``logprobs[t] = log π_rollout(a_t | s_t)`` under the distribution the token was drawn from
    after temperature scaling and before top-k / top-p truncation (see rlxf.rollout.base).
    """

    response_ids: list[int]       # (R,) sampled token ids, stop token included if one was hit
    logprobs: list[float]         # (R,) sampling log-probs, one per response id
    finish_reason: FinishReason
    policy_version: int           # weights version that produced the first token (the oldest)
    error: str | None = None      # why the request failed (finish_reason == "error")
    token_versions: list[int] | None = None  # (R,) version that produced each token, when the weights changed
                                  # while this response was decoded (a partial rollout); None = all policy_version

    def versions(self) -> list[int]:
        """(R,) the weights version that produced each response token."""
        return list(self.token_versions) if self.token_versions is not None \
            else [self.policy_version] * len(self.response_ids)


@dataclass
class Trajectory:
    """One scored sample: a prompt, the policy's response, and its reward.

    For single-turn tasks ``loss_mask`` is all ones; multi-turn environments put 0 on tokens the
    environment wrote (tool output) so only the model's own tokens are trained on. A multi-turn
    ``prompt`` is the first observation; ``response_ids`` every later token, model's and
    environment's, in order; ``response_text`` the model's last turn.
    """

    prompt: Prompt
    group: int                    # index of the prompt within the step: samples of one prompt share it
    response_ids: list[int]       # (R,)
    response_text: str
    rollout_logprobs: list[float]  # (R,) log π_rollout(a_t|s_t) from the engine
    loss_mask: list[int]          # (R,) 1 = model token (trained on), 0 = environment token
    policy_versions: list[int]    # (R,) weights version that produced each token
    finish_reason: FinishReason
    reward: float = 0.0           # combined scalar reward r (weighted sum of verifier scores)
    scores: dict[str, float] = field(default_factory=dict)  # per-verifier scores, for logging
    reward_error: str | None = None  # set when a verifier failed; reward is then the error score
    correct: bool | None = None   # task accuracy where the task defines it
    token_rewards: list[float] | None = None  # (R,) where the reward lands, summing to ``reward``; None = all
                                  # on the last loss_mask=1 token (outcome). Multi-turn per-turn credit.
    episode: dict[str, Any] | None = None  # multi-turn: turns, per-turn rewards, end, error, conversation

    @property
    def longest_turn(self) -> int:
        """Tokens in the model's longest turn: the longest run of loss_mask 1 (the whole response
        of a single turn). ``rollout.max_new_tokens`` limits each turn, so this, not the length
        of a multi-turn response with the environment's tokens in it, is what overlong shaping
        compares with it."""
        longest = run = 0
        for m in self.loss_mask:
            run = run + 1 if m else 0
            longest = max(longest, run)
        return longest


@dataclass
class Experience:
    """A training batch: everything the losses need, padded to (B, T) over response tokens.

    Token ids stay ragged (``prompt_ids`` / ``response_ids``) so the model forward can pack
    sequences without padding; per-token quantities are right-padded with 0 and masked.
    """

    prompt_ids: list[list[int]]   # B lists of prompt ids
    response_ids: list[list[int]]  # B lists of response ids (length R_i <= T)
    mask: torch.Tensor            # (B, T) float, 1 on response tokens that count for the loss
    rollout_logprobs: torch.Tensor  # (B, T) log π_rollout(a_t|s_t), from the engine
    old_logprobs: torch.Tensor | None  # (B, T) log π_old(a_t|s_t), recomputed by the trainer (0 on rows the
                                  # actor skips, Actor.rows_to_run); None when one optimizer step sees
                                  # fresh samples (π_old = π_θ: the update's first forward)
    advantages: torch.Tensor      # (B, T) Â_t
    group_ids: torch.Tensor       # (B,) long, samples of one prompt share a group id
    rewards: torch.Tensor         # (B,) scalar outcome reward per sequence
    ref_logprobs: torch.Tensor | None = None  # (B, T) log π_ref(a_t|s_t), when kl_coef > 0
    values: torch.Tensor | None = None   # (B, T) V_old(s_t) from the critic (PPO)
    returns: torch.Tensor | None = None  # (B, T) value targets G_t (PPO)
    policy_versions: torch.Tensor | None = None  # (B, T) long, weights version that sampled each token

    def __len__(self) -> int:
        return len(self.response_ids)

    def select(self, index: torch.Tensor | list[int]) -> Experience:
        """The rows in ``index`` as a new Experience (for mini- and micro-batches)."""
        idx = torch.as_tensor(index, dtype=torch.long)
        rows = idx.tolist()
        fields = {}
        for name, value in vars(self).items():
            if value is None:
                fields[name] = None
            elif isinstance(value, torch.Tensor):
                fields[name] = value.index_select(0, idx)
            else:
                fields[name] = [value[i] for i in rows]
        return Experience(**fields)

    def trimmed(self) -> Experience:
        """The same rows with (B, T) tensors cut to this batch's longest response."""
        width = max((len(r) for r in self.response_ids), default=0)
        return Experience(**{name: value[:, :width] if isinstance(value, torch.Tensor) and value.dim() == 2
                             else value for name, value in vars(self).items()})
