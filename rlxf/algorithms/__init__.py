"""The RL and preference-learning math of rlxf: pure torch functions of tensors.

No config objects, no ``.item()``, no I/O: tensors and plain numbers in, tensors out, shapes
in every docstring. Importing this package imports torch and nothing else outside the
standard library. The trainer picks functions by name from four registries (``registry``):

- ``advantage``: gae, grpo, maxrl, rloo, reinforce_pp, reinforce_pp_baseline, reinforce
- ``policy_loss``: ppo_clip, dual_clip, gspo, cispo, vanilla
- ``loss_agg``: token_mean, seq_mean_token_mean, seq_mean_token_sum, seq_mean_token_sum_norm
- ``off_policy``: none, tis, mis, decoupled (a weight per token, for samples π_old did not draw)

Where things are: advantages.py, policy_losses.py, aggregation.py, off_policy.py (TIS, MIS,
decoupled PPO), kl.py (estimators and controllers), entropy.py, value.py, preference.py (DPO
family, SimPO, Bradley–Terry), shaping.py (outcome rewards on tokens, DAPO overlong penalty),
groups.py (group statistics, DAPO dynamic sampling), masked.py (masked reductions). See
docs/algorithms.md.
"""

from rlxf.algorithms import registry
from rlxf.algorithms.advantages import (
    AdvantageParams,
    MovingBaseline,
    discounted_returns,
    gae,
    grpo,
    maxrl,
    reinforce,
    reinforce_pp,
    reinforce_pp_baseline,
    rloo,
    sequence_scores,
)
from rlxf.algorithms.aggregation import (
    loss_totals,
    seq_mean_token_mean,
    seq_mean_token_sum,
    seq_mean_token_sum_norm,
    token_mean,
)
from rlxf.algorithms.entropy import entropy_from_logits
from rlxf.algorithms.groups import dynamic_sampling_keep, group_mean_std, zero_variance_fraction
from rlxf.algorithms.kl import (
    KL_ESTIMATORS,
    AdaptiveKLController,
    FixedKLController,
    kl_penalty,
    kl_shaped_rewards,
    make_kl_controller,
)
from rlxf.algorithms.masked import (
    masked_count,
    masked_mean,
    masked_sum,
    masked_var,
    masked_whiten,
    safe_divide,
    zero_masked,
)
from rlxf.algorithms.off_policy import OffPolicyParams, decoupled, importance_ratio, mis, tis
from rlxf.algorithms.policy_losses import (
    PolicyLossParams,
    cispo,
    dual_clip,
    gspo,
    ppo_clip,
    vanilla,
)
from rlxf.algorithms.preference import bradley_terry_loss, dpo_loss, simpo_loss
from rlxf.algorithms.registry import Needs, UnknownNameError, get, names, needs, register
from rlxf.algorithms.shaping import outcome_token_rewards, overlong_buffer_tokens, soft_overlong_penalty
from rlxf.algorithms.value import value_loss

__all__ = [
    "Needs",
    "KL_ESTIMATORS",
    "AdaptiveKLController",
    "AdvantageParams",
    "FixedKLController",
    "MovingBaseline",
    "OffPolicyParams",
    "PolicyLossParams",
    "UnknownNameError",
    "bradley_terry_loss",
    "cispo",
    "decoupled",
    "discounted_returns",
    "dpo_loss",
    "dual_clip",
    "dynamic_sampling_keep",
    "entropy_from_logits",
    "gae",
    "get",
    "group_mean_std",
    "importance_ratio",
    "grpo",
    "gspo",
    "kl_penalty",
    "kl_shaped_rewards",
    "loss_totals",
    "make_kl_controller",
    "masked_count",
    "masked_mean",
    "masked_sum",
    "masked_var",
    "masked_whiten",
    "maxrl",
    "mis",
    "names",
    "needs",
    "outcome_token_rewards",
    "overlong_buffer_tokens",
    "ppo_clip",
    "register",
    "registry",
    "reinforce",
    "reinforce_pp",
    "reinforce_pp_baseline",
    "rloo",
    "safe_divide",
    "seq_mean_token_mean",
    "seq_mean_token_sum",
    "seq_mean_token_sum_norm",
    "sequence_scores",
    "simpo_loss",
    "soft_overlong_penalty",
    "tis",
    "token_mean",
    "value_loss",
    "vanilla",
    "zero_masked",
    "zero_variance_fraction",
]
