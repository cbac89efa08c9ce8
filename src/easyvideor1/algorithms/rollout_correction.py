"""Rollout correction: importance weights for tokens sampled by a policy other than the one the
update's ratio starts from.

The engine samples with its own kernels (vLLM, bf16) and, once rollouts run asynchronously, with
older weights; the trainer's PPO ratio is taken against its own recomputed log-probs (``old``). The
samples then come from ``pi_rollout``, not ``pi_old``, and the surrogate is biased. The decoupled
correction (veRL's rollout correction, following Liu, Li et al. 2025, "When Speed Kills Stability";
AReaL's decoupled PPO for stale samples) multiplies each token's policy loss by the ratio
``rho = pi_old / pi_rollout`` computed from the engine's log-probs of the sampled tokens:

* ``tis`` (truncated importance sampling): ``w = min(rho, cap)``;
* ``mis`` (masked importance sampling): ``w = rho`` inside the band ``[lower, cap]``; a token (or,
  at sequence level, a whole sequence) whose ratio leaves the band is dropped from the loss and
  from its denominator.

``level: token`` uses each token's ratio; ``sequence`` the product over the sequence's sampled
tokens (broadcast to them). Log-ratios are clamped to +-20 before ``exp`` (a safety bound, as in
veRL). Tokens the engine did not sample (an offline response, a given turn, tool results) have no
engine log-prob and get weight 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the config imports the names below: torch loads only when weights are computed
    import torch

ROLLOUT_CORRECTIONS = ("none", "tis", "mis")
CORRECTION_LEVELS = ("token", "sequence")
_LOG_RATIO_BOUND = 20.0


@dataclass
class Correction:
    """Per-token weights ``[N, T]`` (1 where no correction applies), the tokens kept (``mis``
    drops some) and the step's ``rollout/is_*`` metrics."""

    weights: torch.Tensor
    keep: torch.Tensor
    metrics: dict[str, float]


def rollout_correction(
    old_logp: torch.Tensor,
    rollout_logp: torch.Tensor,
    mask: torch.Tensor,
    mode: str,
    level: str = "token",
    cap: float = 2.0,
    lower: float | None = None,
) -> Correction:
    """Importance weights of the tokens under ``mask`` (see the module doc). ``rollout_logp`` is NaN
    where the engine did not sample the token. ``lower`` (``mis``) defaults to ``1 / cap``."""
    import torch

    if mode not in ROLLOUT_CORRECTIONS or mode == "none":
        raise ValueError(f"rollout correction mode must be 'tis' or 'mis', got {mode!r}")
    if level not in CORRECTION_LEVELS:
        raise ValueError(f"rollout correction level must be one of {CORRECTION_LEVELS}, got {level!r}")
    sampled = mask.bool() & ~torch.isnan(rollout_logp)
    log_ratio = torch.where(sampled, old_logp - torch.nan_to_num(rollout_logp), torch.zeros_like(old_logp))
    if level == "sequence":
        log_ratio = log_ratio.sum(1, keepdim=True).expand_as(log_ratio)
    rho = torch.exp(log_ratio.clamp(-_LOG_RATIO_BOUND, _LOG_RATIO_BOUND))
    if mode == "tis":
        hit = sampled & (rho > cap)
        weights = torch.where(sampled, rho.clamp(max=cap), torch.ones_like(rho))
        keep = mask.bool()
    else:
        low = 1.0 / cap if lower is None else lower
        hit = sampled & ((rho > cap) | (rho < low))
        if level == "sequence":  # a sequence leaves the band as a whole
            hit = sampled & hit.any(1, keepdim=True)
        keep = mask.bool() & ~hit
        weights = torch.where(
            sampled & keep, rho, torch.where(keep, torch.ones_like(rho), torch.zeros_like(rho))
        )
    n = max(int(sampled.sum()), 1)
    metrics = {
        "rollout/is_weight_mean": float(weights[sampled].sum()) / n,
        "rollout/is_clipped_frac": float(hit.sum()) / n,  # tis: clamped at the cap; mis: dropped
        "rollout/is_ratio_max": float(rho[sampled].max()) if sampled.any() else 1.0,
    }
    return Correction(weights, keep, metrics)
