"""Policy-gradient losses: per-token loss `[B, T]` plus detached metrics.

Every loss has the signature::

    fn(log_prob, old_log_prob, advantages, response_mask, *, <its options>) -> PolicyLossOutput

with `log_prob` (current policy, requires grad), `old_log_prob` (behaviour policy), `advantages` and
`response_mask` all `[B, T]`. The returned loss is zero (and gradient-free) outside the mask; reduce
it with `aggregation.aggregate_loss`, which owns the token/sequence weighting. Let
`delta = log_prob - old_log_prob`; the ratio is `exp(delta)` with `delta` clamped to +-20 first, so a
stale or -inf old log-prob cannot overflow to inf/NaN.

Metrics (0-d tensors, means over the valid tokens of this call; not globally weighted):
`ppo_kl` = mean(-delta), `pg_clipfrac_higher` = share of tokens whose upper clip bound is active
(A > 0, ratio > 1 + eps_high), `pg_clipfrac_lower` (A < 0, ratio < 1 - eps_low),
`pg_clipfrac_dual` (A < 0, dual clip active). A loss that clips elsewhere (GMPO: the log-ratio)
counts by its own bound, on the same side per advantage sign.

Rollout correction (`algorithm.rollout_correction`) weights each token's loss by
`pi_old / pi_rollout` (`rollout_correction.py`): `compute_policy_loss(..., rollout_is_weights=W)`
multiplies the per-token loss by `W`, unless the loss declares a `rollout_is_weights` parameter
and applies the weights itself (GMPO: as one geometric-mean weight per sequence, as veRL does).

The built-ins are registered by name in `_registry.py` (config checks need no torch), each with the
dataclass of its options (`loss_options.py`, set as `algorithm.loss_options.<option>`); register your
own with `@register_policy_loss("name")` (its keyword-only defaults are its options, or pass
`options=` a dataclass that checks them).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from ._registry import (  # noqa: F401  (register_policy_loss re-exported)
    POLICY_LOSSES,
    ROLLOUT_IS_WEIGHTS,
    call_with_supported,
    register_policy_loss,
)
from .loss_options import DPPO_DIVERGENCES
from .masked import as_bool_mask, masked_mean, masked_sum, sequence_lengths

LOG_RATIO_CLAMP = 20.0  # exp(20) ~ 5e8: large enough to never bind in practice, small enough to stay finite
# GSPO's sequence log-ratio is clamped from above at 10, as veRL's GSPO loss does
GSPO_LOG_RATIO_MAX = 10.0


class PolicyLossOutput(NamedTuple):
    """`loss`: per-token loss `[B, T]` (zero outside the mask); `metrics`: detached 0-d tensors."""

    loss: torch.Tensor
    metrics: dict[str, torch.Tensor]


PolicyLoss = Callable[..., PolicyLossOutput]


def get_policy_loss(name: str) -> PolicyLoss:
    """The loss registered as `name`; raises `UnknownAlgorithmError` listing the known ones."""
    return POLICY_LOSSES.get(name)


def list_policy_losses() -> list[str]:
    """Canonical names of all registered policy losses."""
    return POLICY_LOSSES.names()


def compute_policy_loss(
    name: str,
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    rollout_is_weights: torch.Tensor | None = None,
    **options: Any,
) -> PolicyLossOutput:
    """Run policy loss `name`; options it does not declare are ignored. `rollout_is_weights`
    (`[B, T]`, rollout correction) go to a loss that declares that parameter; any other loss's
    per-token loss is multiplied by them."""
    fn = get_policy_loss(name)
    args = (log_prob, old_log_prob, advantages, response_mask)
    if rollout_is_weights is None:
        return call_with_supported(fn, *args, options=options)
    weights = rollout_is_weights.to(device=log_prob.device, dtype=log_prob.dtype)
    if ROLLOUT_IS_WEIGHTS in inspect.signature(fn).parameters:
        return call_with_supported(fn, *args, options={**options, ROLLOUT_IS_WEIGHTS: weights})
    out = call_with_supported(fn, *args, options=options)
    return PolicyLossOutput(out.loss * weights, out.metrics)


# ----------------------------------------------------------------------------------------- helpers


def _checked_advantages(
    log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Check shapes; return the advantages with padding set to 0 (garbage there would reach backward
    as 0 * NaN through the products below)."""
    shapes = {tuple(t.shape) for t in (log_prob, old_log_prob, advantages, mask)}
    if len(shapes) != 1 or log_prob.dim() != 2:
        raise ValueError(
            f"log_prob, old_log_prob, advantages and response_mask must share one [B, T] shape: {shapes}"
        )
    return torch.where(mask, advantages, torch.zeros((), dtype=advantages.dtype, device=advantages.device))


class _Prepared(NamedTuple):
    """What every loss starts from: the boolean mask, the advantages with padding 0, and
    `log_prob - old_log_prob` with padding 0."""

    mask: torch.Tensor
    advantages: torch.Tensor
    delta: torch.Tensor


def _prepared(
    log_prob: torch.Tensor, old_log_prob: torch.Tensor, advantages: torch.Tensor, response_mask: torch.Tensor
) -> _Prepared:
    mask = as_bool_mask(response_mask)
    advantages = _checked_advantages(log_prob, old_log_prob, advantages, mask)
    return _Prepared(mask, advantages, _valid_delta(log_prob, old_log_prob, mask))


def _check_clip(clip_ratio_low: float, clip_ratio_high: float) -> None:
    if not (0.0 <= clip_ratio_low < 1.0 and clip_ratio_high >= 0.0):
        raise ValueError(
            f"need 0 <= clip_ratio_low < 1 and clip_ratio_high >= 0, got {clip_ratio_low}, {clip_ratio_high}"
        )


def _valid_delta(log_prob: torch.Tensor, old_log_prob: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`log_prob - old_log_prob` with padding replaced by 0 (padding may hold -inf)."""
    zero = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    return torch.where(mask, log_prob - old_log_prob, zero)


def _ratio(delta: torch.Tensor) -> torch.Tensor:
    """`exp(delta)` with the log-ratio clamped to +-LOG_RATIO_CLAMP (finite for any delta)."""
    return torch.exp(delta.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))


def _safe_log_prob(log_prob: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """`log_prob` with padding set to 0 (it may hold -inf: keeps 0 * -inf out of the backward)."""
    return torch.where(mask, log_prob, torch.zeros((), dtype=log_prob.dtype, device=log_prob.device))


def _clipped_surrogate(
    log_ratio: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_dual: float | None,
    log_ratio_max: float = LOG_RATIO_CLAMP,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's clipped objective with asymmetric bounds and optional dual clip, per token.

    `L = max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high))`, and for A < 0 additionally
    `L = min(L, -A c)` (dual clip: bounds the loss of a token whose ratio exploded).
    """
    _check_clip(clip_ratio_low, clip_ratio_high)
    if clip_ratio_dual is not None and clip_ratio_dual <= 1.0:
        raise ValueError(f"clip_ratio_dual must be > 1 (or None to disable), got {clip_ratio_dual}")
    log_ratio = log_ratio.clamp(-LOG_RATIO_CLAMP, log_ratio_max)
    ratio = torch.exp(log_ratio)
    # Clamping in log space is the same as clamping the ratio, and stays finite for huge deltas.
    clipped = torch.exp(log_ratio.clamp(math.log(1.0 - clip_ratio_low), math.log1p(clip_ratio_high)))
    unclipped_loss = -advantages * ratio
    clipped_loss = -advantages * clipped
    loss = torch.maximum(unclipped_loss, clipped_loss)
    negative = advantages < 0
    dual_active = torch.zeros_like(mask)
    if clip_ratio_dual is not None:
        dual_loss = -advantages * clip_ratio_dual
        dual_active = negative & (dual_loss < loss)
        loss = torch.where(negative, torch.minimum(loss, dual_loss), loss)
    loss = torch.where(mask, loss, torch.zeros((), dtype=loss.dtype, device=loss.device))
    with torch.no_grad():
        r = ratio.detach()
        metrics = {
            "pg_clipfrac_higher": masked_mean(((advantages > 0) & (r > 1.0 + clip_ratio_high)).float(), mask),
            "pg_clipfrac_lower": masked_mean((negative & (r < 1.0 - clip_ratio_low)).float(), mask),
            "pg_clipfrac_dual": masked_mean(dual_active.float(), mask),
        }
    return loss, metrics


def sequence_log_ratio(delta: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Masked mean of the token log-ratios of each sequence, `[B]` (0 for an empty row)."""
    return masked_sum(delta, mask, dim=-1) / sequence_lengths(mask).clamp(min=1).to(delta.dtype)


def _metrics(
    delta: torch.Tensor, mask: torch.Tensor, extra: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        return {"ppo_kl": masked_mean(-delta.detach(), mask), **extra}


# ------------------------------------------------------------------------------------------ losses


def ppo(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.28,
    clip_ratio_dual: float | None = 3.0,
) -> PolicyLossOutput:
    """PPO/GRPO/DAPO token-level clipped surrogate; `clip_ratio_high > clip_ratio_low` is DAPO's
    clip-higher (more room to raise low-probability tokens, against entropy collapse)."""
    mask, advantages, delta = _prepared(log_prob, old_log_prob, advantages, response_mask)
    loss, clip = _clipped_surrogate(delta, advantages, mask, clip_ratio_low, clip_ratio_high, clip_ratio_dual)
    return PolicyLossOutput(loss, _metrics(delta, mask, clip))


def gspo(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.28,
    clip_ratio_dual: float | None = None,
) -> PolicyLossOutput:
    """GSPO (Zheng et al., 2025, arXiv:2507.18071): one sequence-level ratio `exp(mean_t delta)`
    for every token of the sequence, clipped like PPO (GSPO's paper uses much tighter bounds, e.g.
    3e-4 / 4e-4; set them in the config). As in the paper and veRL, no dual clip unless one is set
    (`algorithm.loss_options.gspo_clip_ratio_dual`), and the log-ratio is clamped at 10 from above."""
    mask, advantages, delta = _prepared(log_prob, old_log_prob, advantages, response_mask)
    seq = sequence_log_ratio(delta, mask).unsqueeze(-1).expand_as(delta)
    loss, clip = _clipped_surrogate(
        seq, advantages, mask, clip_ratio_low, clip_ratio_high, clip_ratio_dual, GSPO_LOG_RATIO_MAX
    )
    return PolicyLossOutput(loss, _metrics(delta, mask, clip))


def gspo_token(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.28,
    clip_ratio_dual: float | None = None,
) -> PolicyLossOutput:
    """GSPO-token (arXiv:2507.18071): log-ratio `sg(mean_t delta) + log_prob - sg(log_prob)`; no
    dual clip unless set, log-ratio clamped at 10 from above (as ``gspo``).

    Its value is the sequence log-ratio at every token, but each token's gradient flows through its
    own log-prob only, which lets per-token advantages be used. With advantages constant per
    sequence it has exactly GSPO's gradient.
    """
    mask, advantages, delta = _prepared(log_prob, old_log_prob, advantages, response_mask)
    seq = sequence_log_ratio(delta, mask).detach().unsqueeze(-1)
    zero = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    own = torch.where(mask, log_prob - log_prob.detach(), zero)  # value 0, gradient d log_prob
    loss, clip = _clipped_surrogate(
        seq + own, advantages, mask, clip_ratio_low, clip_ratio_high, clip_ratio_dual, GSPO_LOG_RATIO_MAX
    )
    return PolicyLossOutput(loss, _metrics(delta, mask, clip))


def cispo(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.28,
) -> PolicyLossOutput:
    """CISPO (MiniMax-M1): `L = -A * sg(clip(ratio, 1 - eps_low, 1 + eps_high)) * log_prob`.

    The importance weight is clipped and detached, so no token is dropped from the gradient (unlike
    PPO clipping, which zeroes it); the gradient flows only through `log_prob`.
    """
    mask, advantages, delta = _prepared(log_prob, old_log_prob, advantages, response_mask)
    _check_clip(clip_ratio_low, clip_ratio_high)
    with torch.no_grad():
        ratio = _ratio(delta)
        weight = ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
        clip = {
            "pg_clipfrac_higher": masked_mean((ratio > 1.0 + clip_ratio_high).float(), mask),
            "pg_clipfrac_lower": masked_mean((ratio < 1.0 - clip_ratio_low).float(), mask),
        }
    zero = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    safe_log_prob = _safe_log_prob(log_prob, mask)
    loss = torch.where(mask, -advantages * weight * safe_log_prob, zero)
    return PolicyLossOutput(loss, _metrics(delta, mask, clip))


def sapo(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    sapo_tau_pos: float = 1.0,
    sapo_tau_neg: float = 1.05,
) -> PolicyLossOutput:
    """SAPO, soft adaptive policy optimization (Gao et al., 2025, arXiv:2511.20347): no hard clip;
    each token's ratio passes a smooth gate `f(r) = sigmoid(tau (r - 1)) * 4 / tau`, with
    `tau_pos` for positive and `tau_neg` (larger: a faster fall-off) for other advantages, and
    `L = -f(r) A`. At `r = 1` the gate's slope is 1, so on-policy it is the plain policy gradient;
    far from 1 the gradient fades instead of stopping. The paper (and veRL) average per sequence:
    use it with `loss_agg_mode=seq-mean-token-mean` (the config insists)."""
    mask, advantages, delta = _prepared(log_prob, old_log_prob, advantages, response_mask)
    if sapo_tau_pos <= 0 or sapo_tau_neg <= 0:
        raise ValueError(f"sapo temperatures must be > 0, got {sapo_tau_pos} / {sapo_tau_neg}")
    ratio = _ratio(delta)
    tau = torch.where(advantages > 0, sapo_tau_pos, sapo_tau_neg).to(ratio.dtype)
    gate = torch.sigmoid(tau * (ratio - 1.0)) * (4.0 / tau)
    loss = torch.where(mask, -gate * advantages, torch.zeros((), dtype=ratio.dtype, device=ratio.device))
    return PolicyLossOutput(loss, _metrics(delta, mask, {}))


def geo_mean(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.28,
    rollout_is_weights: torch.Tensor | None = None,
) -> PolicyLossOutput:
    """GMPO, geometric-mean policy optimization (Zhao et al., 2025, arXiv:2507.20673): one ratio per
    sequence, the geometric mean of its token ratios after each token's log-ratio is clipped to
    `[-clip_ratio_low, clip_ratio_high]` (in log space, on the side its advantage's sign makes
    pessimistic), times the sequence's mean advantage: `L_i = -A_i exp(mean_t clip(delta_t))`.
    The geometric mean is far less moved by one outlier token than PPO's arithmetic token mean.
    Each valid token carries its sequence's `L_i`, so `loss_agg_mode=seq-mean-token-mean` (which
    the config insists on) gives the paper's (and veRL's) mean over sequences.

    Rollout correction: the token weights `w_t` enter as one weight per sequence, their geometric
    mean `exp(mean_t log w_t)`, consistent with the geometric token ratio (veRL 0.9.1's definition);
    multiplying each token's `L_i` by its own `w_t` would weigh the sequence by their arithmetic
    mean instead (weights 2 and 0.5: 1 here, 1.25 that way). The two agree where a sequence's
    weights are all equal (sequence level, every token sampled by the engine).

    Clip fractions: for A > 0 the tokens whose upper bound is active (`delta > clip_ratio_high`),
    for A < 0 those whose lower bound is (`delta < -clip_ratio_low`); a token clipped on the other
    side leaves the loss unchanged (the pessimistic minimum keeps its own value) and is not counted."""
    mask, advantages, delta = _prepared(log_prob, old_log_prob, advantages, response_mask)
    _check_clip(clip_ratio_low, clip_ratio_high)
    sign = torch.sign(advantages)
    clamped = delta.clamp(-clip_ratio_low, clip_ratio_high)
    pessimistic = sign * torch.minimum(sign * delta, sign * clamped)
    lengths = sequence_lengths(mask).to(delta.dtype)
    zero = torch.zeros((), dtype=delta.dtype, device=delta.device)
    log_ratio = torch.where(mask, pessimistic, zero).sum(-1) / (lengths + 1e-8)
    seq_adv = torch.where(mask, advantages, zero).sum(-1) / (lengths + 1e-8)
    per_sequence = -seq_adv * torch.exp(log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    if rollout_is_weights is not None:
        # a token mis dropped (weight 0) is outside the mask: its log never enters the mean
        log_weights = torch.where(mask, rollout_is_weights.detach().clamp(min=1e-10).log(), zero)
        per_sequence = per_sequence * torch.exp(log_weights.sum(-1) / (lengths + 1e-8))
    loss = torch.where(mask, per_sequence.unsqueeze(-1).expand_as(delta), zero)
    with torch.no_grad():
        clip = {
            "pg_clipfrac_higher": masked_mean(((advantages > 0) & (delta > clip_ratio_high)).float(), mask),
            "pg_clipfrac_lower": masked_mean(((advantages < 0) & (delta < -clip_ratio_low)).float(), mask),
        }
    return PolicyLossOutput(loss, _metrics(delta, mask, clip))


def _covariance(advantages: torch.Tensor, log_prob: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each valid token's `(A - mean A)(log p - mean log p)` over the valid tokens of the call (the
    covariance terms whose large values drive entropy collapse), no gradient; -inf elsewhere."""
    with torch.no_grad():
        lp = torch.where(mask, log_prob.detach(), torch.zeros_like(log_prob))
        cov = (advantages - masked_mean(advantages, mask)) * (lp - masked_mean(lp, mask))
        return torch.where(mask, cov, torch.full_like(cov, float("-inf")))


def clip_cov(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    clip_ratio_low: float = 0.2,
    clip_ratio_high: float = 0.28,
    clip_cov_ratio: float = 0.0002,
    clip_cov_lb: float = 1.0,
    clip_cov_ub: float = 5.0,
) -> PolicyLossOutput:
    """Clip-Cov (Cui et al., 2025, "The Entropy Mechanism of RL for Reasoning LMs",
    arXiv:2505.22617): PPO's clipped loss, plus a random `clip_cov_ratio` share of the tokens
    (at least one) whose covariance term lies in `(clip_cov_lb, clip_cov_ub)` and that PPO's clip
    left alone get no gradient at all, which slows the entropy collapse those tokens drive."""
    mask, advantages, delta = _prepared(log_prob, old_log_prob, advantages, response_mask)
    _check_clip(clip_ratio_low, clip_ratio_high)
    if clip_cov_ratio <= 0:
        raise ValueError(f"clip_cov_ratio must be > 0, got {clip_cov_ratio}")
    ratio = _ratio(delta)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    cov = _covariance(advantages, log_prob, mask)
    cov = torch.where(clipped > unclipped, torch.full_like(cov, float("-inf")), cov)  # PPO clips these
    candidates = ((cov > clip_cov_lb) & (cov < clip_cov_ub) & mask).nonzero()
    count = max(int(clip_cov_ratio * int(mask.sum())), 1)
    chosen = candidates[torch.randperm(len(candidates), device=candidates.device)[:count]]
    keep = torch.ones_like(ratio)
    keep[chosen[:, 0], chosen[:, 1]] = 0.0
    zero = torch.zeros((), dtype=ratio.dtype, device=ratio.device)
    loss = torch.where(mask, torch.maximum(unclipped, clipped) * keep, zero)
    with torch.no_grad():
        clip = {"pg_clipfrac_cov": masked_mean((keep == 0).float(), mask)}
    return PolicyLossOutput(loss, _metrics(delta, mask, clip))


def kl_cov(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    kl_cov_ratio: float = 0.0002,
    kl_cov_coef: float = 0.1,
) -> PolicyLossOutput:
    """KL-Cov (arXiv:2505.22617, as Clip-Cov): the unclipped policy-gradient loss `-A r`, plus a
    `kl_cov_coef * |log r|` penalty on the `kl_cov_ratio` share of tokens (at least one) with the
    largest covariance terms, which keeps exactly those tokens near the old policy."""
    mask, advantages, delta = _prepared(log_prob, old_log_prob, advantages, response_mask)
    if kl_cov_ratio <= 0:
        raise ValueError(f"kl_cov_ratio must be > 0, got {kl_cov_ratio}")
    ratio = _ratio(delta)
    loss = -advantages * ratio
    valid = int(mask.sum())
    if valid:
        cov = _covariance(advantages, log_prob, mask).flatten()
        top = torch.topk(cov, max(1, int(valid * kl_cov_ratio))).indices
        penalised = torch.zeros(mask.numel(), dtype=torch.bool, device=mask.device)
        penalised[top] = True
        loss = torch.where(penalised.view_as(mask), loss + kl_cov_coef * delta.abs(), loss)
    loss = torch.where(mask, loss, torch.zeros((), dtype=loss.dtype, device=loss.device))
    return PolicyLossOutput(
        loss, _metrics(delta, mask, {"ppo_kl_abs": masked_mean(delta.detach().abs(), mask)})
    )


def dppo(
    log_prob: torch.Tensor,
    old_log_prob: torch.Tensor,
    advantages: torch.Tensor,
    response_mask: torch.Tensor,
    *,
    dppo_divergence: str = "binary_tv",
    dppo_delta_low: float = 0.15,
    dppo_delta_high: float = 0.15,
    dppo_ratio_cap: float = 20.0,
) -> PolicyLossOutput:
    """DPPO, divergence proximal policy optimization ("Rethinking the Trust Region in LLM
    Reinforcement Learning", Qi et al., 2026, arXiv:2602.04879; TRL's ``DPPOTrainer``): PPO's
    ratio clip is replaced by a trust region on a divergence between the old and the current
    policy at the sampled token, `p = pi(a)` vs `q = pi_old(a)`: `binary_tv` is `|p - q|`,
    `binary_kl` the KL between the Bernoulli distributions `(q, 1 - q)` and `(p, 1 - p)`. A token
    leaves the region (no gradient) when its divergence exceeds `delta_high` while `p` rises with a
    positive advantage, or `delta_low` while `p` falls otherwise. The loss is
    `-A * sg(min(r, cap)) * log p` on the tokens in the region (the top-K variants, which need the
    engine's top-K distributions, are not offered)."""
    mask, advantages, delta = _prepared(log_prob, old_log_prob, advantages, response_mask)
    if dppo_divergence not in DPPO_DIVERGENCES:
        raise ValueError(
            f"dppo_divergence must be one of {', '.join(DPPO_DIVERGENCES)}, got {dppo_divergence!r}"
        )
    zero = torch.zeros((), dtype=log_prob.dtype, device=log_prob.device)
    with torch.no_grad():
        p = torch.where(mask, log_prob.detach(), zero).exp()
        q = torch.where(mask, old_log_prob, zero).exp()
        if dppo_divergence == "binary_tv":
            divergence = (p - q).abs()
        else:
            pc, qc = p.clamp(1e-7, 1 - 1e-7), q.clamp(1e-7, 1 - 1e-7)
            divergence = qc * (qc / pc).log() + (1 - qc) * ((1 - qc) / (1 - pc)).log()
        rising = (divergence > dppo_delta_high) & (p > q)
        falling = (divergence > dppo_delta_low) & (p < q)
        inside = torch.where(advantages > 0, ~rising, ~falling) & mask
        weight = _ratio(delta).clamp(max=dppo_ratio_cap)
        outside = mask & ~inside
        clip = {
            "pg_clipfrac_higher": masked_mean((outside & (advantages > 0)).float(), mask),
            "pg_clipfrac_lower": masked_mean((outside & (advantages < 0)).float(), mask),
        }
    safe_log_prob = _safe_log_prob(log_prob, mask)
    loss = torch.where(inside, -advantages * weight * safe_log_prob, zero)
    return PolicyLossOutput(loss, _metrics(delta, mask, clip))
