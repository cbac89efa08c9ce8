"""KL regularisation towards a reference policy, per token, from log-probs of the sampled tokens.

Estimators of KL(pi_theta || pi_ref) with `x = ref_log_prob - log_prob` (Schulman's k1/k2/k3):

* `none`: 0 (no reference model needed).
* `k1` (alias `kl`): `log_prob - ref_log_prob` = `-x`; unbiased, high variance, can be negative.
* `abs`: `|log_prob - ref_log_prob|`.
* `k2` (alias `mse`): `0.5 (log_prob - ref_log_prob)^2`.
* `k3` (alias `low_var_kl`): `exp(x) - x - 1` >= 0, unbiased and low variance. As in the reference,
  `x` is clamped to +-20 (so `exp` cannot overflow) and the result is clamped to <= 10, which caps a
  token whose reference probability is far above the policy's (x > ~2.53) and zeroes its gradient.

The reference's `full` mode (F.kl_div on the sampled tokens' log-probs, not a full-vocabulary KL) is
deliberately absent. Two ways to use the penalty:

* as a loss term: `kl_loss(...)`, aggregated with the same mode and global-batch stats as the
  policy loss, added as `coef * kl_loss`;
* as a reward penalty: `kl_penalty_rewards(...)`, `token_rewards = scores - coef * KL` on the valid
  tokens, before the advantage estimator.

`coef` is fixed (`FixedKLController`) or adapted towards a target KL (`AdaptiveKLController`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from ._registry import KL_ESTIMATORS, register_kl_estimator  # noqa: F401  (re-exported)
from .aggregation import GlobalBatchStats, aggregate_loss
from .masked import as_bool_mask, masked_mean, scores_to_token_rewards

K3_LOG_RATIO_CLAMP = 20.0
K3_VALUE_CLAMP = 10.0

KLEstimator = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


# the estimators below are registered by name in `_registry.py` (config checks need no torch)
def _none(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(log_prob)


def _k1(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    return log_prob - ref_log_prob


def _abs(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    return (log_prob - ref_log_prob).abs()


def _k2(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    return 0.5 * (log_prob - ref_log_prob).square()


def _k3(log_prob: torch.Tensor, ref_log_prob: torch.Tensor) -> torch.Tensor:
    x = (ref_log_prob - log_prob).clamp(-K3_LOG_RATIO_CLAMP, K3_LOG_RATIO_CLAMP)
    return (torch.exp(x) - x - 1.0).clamp(-K3_VALUE_CLAMP, K3_VALUE_CLAMP)


def list_kl_estimators() -> list[str]:
    """Canonical names of the registered KL estimators."""
    return KL_ESTIMATORS.names()


def kl_penalty(
    log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    kind: str = "k3",
    response_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token KL estimate `[B, T]`; exactly 0 (no NaN, no gradient) outside `response_mask`."""
    if log_prob.shape != ref_log_prob.shape:
        raise ValueError(
            f"log_prob {tuple(log_prob.shape)} and ref_log_prob {tuple(ref_log_prob.shape)} differ"
        )
    estimator = KL_ESTIMATORS.get(kind)
    if response_mask is None:
        return estimator(log_prob, ref_log_prob)
    mask = as_bool_mask(response_mask)
    zero = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    # Select the inputs, not just the output: -inf - -inf at padding is NaN, and squaring it would
    # send NaN through backward even though the forward value is masked out.
    kl = estimator(
        torch.where(mask, log_prob, zero), torch.where(mask, ref_log_prob, zero.to(ref_log_prob.dtype))
    )
    return torch.where(mask, kl, torch.zeros((), dtype=kl.dtype, device=kl.device))


def kl_loss(
    log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    kind: str = "k3",
    mode: str = "token-mean",
    *,
    global_stats: GlobalBatchStats | None = None,
    norm_length: int | None = None,
) -> torch.Tensor:
    """KL as a loss term, aggregated exactly like the policy loss (multiply by the coefficient)."""
    kl = kl_penalty(log_prob, ref_log_prob, kind, response_mask)
    return aggregate_loss(kl, response_mask, mode, global_stats=global_stats, norm_length=norm_length)


class KLRewardOutput(NamedTuple):
    """`token_rewards` `[B, T]` after the penalty, per-token `kl` `[B, T]` and its token-mean `mean_kl`."""

    token_rewards: torch.Tensor
    kl: torch.Tensor
    mean_kl: torch.Tensor


def kl_penalty_rewards(
    scores: torch.Tensor,
    log_prob: torch.Tensor,
    ref_log_prob: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    coef: float,
    kind: str = "k3",
) -> KLRewardOutput:
    """In-reward KL: `token_rewards = scores - coef * KL` on valid tokens (no gradient).

    `scores` `[B]` are first placed on each sequence's last token; `[B, T]` token rewards are used as
    they are. Feed `token_rewards` to the advantage estimator; `mean_kl` feeds the KL controller.
    """
    mask = as_bool_mask(response_mask)
    with torch.no_grad():
        kl = kl_penalty(log_prob.detach(), ref_log_prob.detach(), kind, mask)
        rewards = scores_to_token_rewards(torch.as_tensor(scores, device=mask.device), mask)
        token_rewards = rewards - coef * kl.to(rewards.dtype)
    return KLRewardOutput(token_rewards, kl, masked_mean(kl, mask))


class FixedKLController:
    """A constant KL coefficient."""

    def __init__(self, coef: float) -> None:
        self.value = float(coef)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Nothing to adapt."""


class AdaptiveKLController:
    """Adaptive coefficient (Ziegler et al., 2019; TRL's controller).

    After each batch: `coef *= 1 + clip(kl / target - 1, -0.2, 0.2) * n_steps / horizon`, so the
    coefficient grows while the measured KL is above `target` and shrinks below it, by at most 20%
    of `n_steps / horizon` per update.
    """

    def __init__(self, init_coef: float, target: float, horizon: int) -> None:
        if target <= 0 or horizon <= 0:
            raise ValueError(f"adaptive KL needs target > 0 and horizon > 0, got {target}, {horizon}")
        self.value = float(init_coef)
        self.target = float(target)
        self.horizon = int(horizon)

    def update(self, current_kl: float, n_steps: int) -> None:
        """Adapt the coefficient after `n_steps` samples (or steps) with mean KL `current_kl`."""
        error = min(max(float(current_kl) / self.target - 1.0, -0.2), 0.2)
        self.value *= 1.0 + error * n_steps / self.horizon
