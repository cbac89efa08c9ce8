"""RL algorithms for verifiable rewards: pure tensor math, no model code.

    from easyvideor1.algorithms import (
        AlgorithmConfig, GlobalBatchStats, aggregate_loss, compute_advantages, compute_policy_loss,
    )
    cfg = AlgorithmConfig()                                   # GRPO + DAPO clip-higher, token-mean
    adv = compute_advantages(cfg.adv_estimator, scores, mask, uids, **cfg.advantage_options())
    stats = GlobalBatchStats.from_masks(micro_masks).all_reduce()   # once per optimizer step
    out = compute_policy_loss(cfg.policy_loss, logp, old_logp, adv_mb, mask_mb, **cfg.policy_loss_options())
    aggregate_loss(out.loss, mask_mb, cfg.loss_agg_mode, global_stats=stats).backward()

Advantage estimators, policy losses and KL estimators are registries (`_registry.py`, torch-free):
add one with `@register_advantage("name", group=True)`, `@register_policy_loss("name")` or
`@register_kl_estimator("name")`; a distillation objective with `@register_distill_objective("name")`.
"""

from __future__ import annotations

import importlib
from typing import Any

# Each public name and the module it lives in. The names are imported on first use (PEP 562), not
# here: the run config imports ``algorithms.config``, which runs this file first, and reading a
# config (``easyvideor1 --help``, ``eval --list``) must not load torch, which the tensor modules need.
_EXPORTS = {
    # torch-free: registering and checking names needs no tensor code
    "_registry": (
        "GREEDY_BASELINE",
        "RAW_REWARD_KEYS",
        "UnknownAlgorithmError",
        "advantage_inputs",
        "is_group_estimator",
        "load_plugin_files",
        "register_advantage",
        "register_distill_objective",
        "register_kl_estimator",
        "register_policy_loss",
    ),
    "advantages": (
        "AdvantageOutput",
        "compute_advantages",
        "get_advantage_estimator",
        "group_normalize",
        "list_advantage_estimators",
    ),
    "aggregation": ("LOSS_AGG_MODES", "GlobalBatchStats", "aggregate_loss"),
    "config": ("AlgorithmConfig", "KLConfig", "OnlineFilterConfig", "OverlongConfig"),
    "distill": ("DistillInputs", "DistillOutput", "TeacherSignal", "distill_advantages"),
    "distill_config": ("DistillConfig",),
    "filtering": ("DynamicSampler", "GroupFilterResult", "RoundSummary", "filter_groups"),
    "kl": (
        "AdaptiveKLController",
        "FixedKLController",
        "kl_loss",
        "kl_penalty",
        "kl_penalty_rewards",
        "list_kl_estimators",
    ),
    "logits": ("entropy_from_logits", "logprobs_from_logits"),
    "masked": ("masked_mean", "masked_sum", "masked_whiten", "scores_to_token_rewards"),
    "policy_losses": (
        "PolicyLossOutput",
        "compute_policy_loss",
        "get_policy_loss",
        "list_policy_losses",
    ),
    "shaping": ("ShapedRewards", "overlong_penalty", "shape_rewards"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups find it without coming here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
