"""RL algorithms for verifiable rewards: pure tensor math, no model code.

    from easyvideor1.algorithms import (
        AlgorithmConfig, GlobalBatchStats, aggregate_loss, compute_advantages, compute_policy_loss,
    )
    cfg = AlgorithmConfig()                                   # GRPO + DAPO clip-higher, token-mean
    adv = compute_advantages(cfg.adv_estimator, scores, mask, uids, **cfg.advantage_options())
    stats = GlobalBatchStats.from_masks(micro_masks).all_reduce()   # once per optimizer step
    out = compute_policy_loss(cfg.policy_loss, logp, old_logp, adv_mb, mask_mb, **cfg.policy_loss_options())
    aggregate_loss(out.loss, mask_mb, cfg.loss_agg_mode, global_stats=stats).backward()

Advantage estimators, policy losses and KL estimators are registries: add one with
`@register_advantage("name")`, `@register_policy_loss("name")` or `@register_kl_estimator("name")`.
"""

from ._registry import UnknownAlgorithmError, load_plugin_files
from .advantages import (
    GREEDY_BASELINE,
    RAW_REWARD_KEYS,
    AdvantageOutput,
    advantage_inputs,
    compute_advantages,
    get_advantage_estimator,
    group_normalize,
    list_advantage_estimators,
    register_advantage,
)
from .aggregation import LOSS_AGG_MODES, GlobalBatchStats, aggregate_loss
from .config import AlgorithmConfig, KLConfig, OnlineFilterConfig, OverlongConfig
from .filtering import DynamicSampler, GroupFilterResult, RoundSummary, filter_groups
from .kl import (
    AdaptiveKLController,
    FixedKLController,
    kl_loss,
    kl_penalty,
    kl_penalty_rewards,
    list_kl_estimators,
    register_kl_estimator,
)
from .logits import entropy_from_logits, logprobs_from_logits
from .masked import masked_mean, masked_sum, masked_whiten, scores_to_token_rewards
from .policy_losses import (
    PolicyLossOutput,
    compute_policy_loss,
    get_policy_loss,
    list_policy_losses,
    register_policy_loss,
)
from .shaping import ShapedRewards, overlong_penalty, shape_rewards

__all__ = [
    "GREEDY_BASELINE",
    "RAW_REWARD_KEYS",
    "ShapedRewards",
    "advantage_inputs",
    "load_plugin_files",
    "shape_rewards",
    "LOSS_AGG_MODES",
    "AdaptiveKLController",
    "AdvantageOutput",
    "AlgorithmConfig",
    "DynamicSampler",
    "FixedKLController",
    "GlobalBatchStats",
    "GroupFilterResult",
    "KLConfig",
    "OnlineFilterConfig",
    "OverlongConfig",
    "PolicyLossOutput",
    "RoundSummary",
    "UnknownAlgorithmError",
    "aggregate_loss",
    "compute_advantages",
    "compute_policy_loss",
    "entropy_from_logits",
    "filter_groups",
    "get_advantage_estimator",
    "get_policy_loss",
    "group_normalize",
    "kl_loss",
    "kl_penalty",
    "kl_penalty_rewards",
    "list_advantage_estimators",
    "list_kl_estimators",
    "list_policy_losses",
    "logprobs_from_logits",
    "masked_mean",
    "masked_sum",
    "masked_whiten",
    "overlong_penalty",
    "register_advantage",
    "register_kl_estimator",
    "register_policy_loss",
    "scores_to_token_rewards",
]
