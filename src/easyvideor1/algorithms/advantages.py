"""Advantage estimators: per-sequence (or token-level) rewards -> token-level advantages.

Every estimator has the signature::

    fn(scores, response_mask, group_ids, *, <its options>) -> AdvantageOutput

* `scores`: `[B]` per-sequence scores, or `[B, T]` token-level rewards (outcome reward on the last
  token, possibly minus an in-reward KL penalty; a sequence's score is then the masked sum over
  tokens). GDPO takes a mapping `{reward key: [B] or [B, T]}`.
* `response_mask`: `[B, T]`, 1/True on response tokens.
* `group_ids`: `[B]` ints (or hashables such as uid strings); rows with equal ids are the `n`
  responses to one prompt.

The output advantages are `[B, T]` and exactly zero where the mask is 0. `returns` is the
reward-to-go (discounted for REINFORCE++), mainly for logging. Group statistics are computed in
float64 so that small groups and tiny reward differences are not dominated by rounding.

Conventions of the GRPO family (grpo, dr_grpo, rloo, gdpo's per-key step):
* a group of size 1 has no baseline to compare with: its advantage is 0 (the reference asserted
  n > 1 instead; here a prompt whose other responses were filtered out simply carries no signal);
* a group whose scores are all equal gets advantage exactly 0 (forced, not left to rounding).

The built-ins below are registered by name in `_registry.py` (so config checks need no torch); register
your own with `@register_advantage("name", group=True)` (`group`: it compares the responses of one
prompt). `compute_advantages(name, ...)` dispatches by name and passes each estimator only the options
its signature declares.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import torch

from ._registry import (  # noqa: F401  (re-exported: the registry and its names live there, torch-free)
    ADVANTAGE_ESTIMATORS,
    ADVANTAGE_INPUT_KINDS,
    GREEDY_BASELINE,
    RAW_REWARD_KEYS,
    advantage_inputs,
    call_with_supported,
    register_advantage,
)
from .masked import (
    GroupIndex,
    as_bool_mask,
    group_index,
    masked_whiten,
    scores_to_token_rewards,
    sequence_scores,
)

GroupIds = torch.Tensor | Sequence[Any]


class AdvantageOutput(NamedTuple):
    """Token-level `advantages` and `returns`, both `[B, T]`, zero outside the response mask."""

    advantages: torch.Tensor
    returns: torch.Tensor


AdvantageEstimator = Callable[..., AdvantageOutput]


def get_advantage_estimator(name: str) -> AdvantageEstimator:
    """The estimator registered as `name`; raises `UnknownAlgorithmError` listing the known ones."""
    return ADVANTAGE_ESTIMATORS.get(name)


def list_advantage_estimators() -> list[str]:
    """Canonical names of all registered estimators."""
    return ADVANTAGE_ESTIMATORS.names()


def compute_advantages(
    name: str,
    scores: torch.Tensor | Mapping[str, torch.Tensor],
    response_mask: torch.Tensor,
    group_ids: GroupIds,
    **options: Any,
) -> AdvantageOutput:
    """Run estimator `name`; options it does not declare are ignored (so a config can pass them all)."""
    return call_with_supported(
        get_advantage_estimator(name), scores, response_mask, group_ids, options=options
    )


# ----------------------------------------------------------------------------------------- helpers


def _prepare(scores: Any, response_mask: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Validate `scores` against the mask; return (float64 scores [B] or [B, T], bool mask)."""
    if isinstance(scores, Mapping):
        raise TypeError(f"{name} takes one score tensor; pick a reward key (only 'gdpo' takes a mapping)")
    scores = torch.as_tensor(scores)
    mask = as_bool_mask(response_mask)
    if mask.dim() != 2:
        raise ValueError(f"response_mask must be [B, T], got shape {tuple(mask.shape)}")
    if scores.shape not in ((mask.shape[0],), tuple(mask.shape)):
        raise ValueError(
            f"scores must be [B] or [B, T] for a mask {tuple(mask.shape)}, got {tuple(scores.shape)}"
        )
    # A NaN reward would silently poison its whole group (and, through whitening, the batch).
    if not bool(torch.isfinite(scores).all()):
        raise ValueError(f"{name}: scores contain NaN or inf")
    return scores.to(device=mask.device, dtype=torch.float64), mask


def _out_dtype(scores: Any) -> torch.dtype:
    dtype = scores.dtype if isinstance(scores, torch.Tensor) and scores.is_floating_point() else torch.float32
    return torch.promote_types(dtype, torch.float32)


def _broadcast(per_sequence: torch.Tensor, mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`[B]` -> `[B, T]` on the valid tokens, exact zeros elsewhere."""
    values = per_sequence.unsqueeze(-1).expand(mask.shape)
    return torch.where(mask, values, torch.zeros((), dtype=values.dtype, device=values.device)).to(dtype)


def _groups(group_ids: GroupIds, batch: int, device: torch.device) -> GroupIndex:
    groups = group_index(group_ids, device=device)
    if groups.inverse.numel() != batch:
        raise ValueError(f"group_ids has {groups.inverse.numel()} entries for a batch of {batch}")
    return groups


def _no_signal(scores: torch.Tensor, groups: GroupIndex) -> torch.Tensor:
    """Rows whose group has one member or all-equal scores (they get advantage exactly 0)."""
    inv = groups.inverse
    equal = groups.reduce(scores, "amax")[inv] == groups.reduce(scores, "amin")[inv]
    return equal | (groups.count()[inv] < 2)


def group_normalize(
    scores: torch.Tensor,
    groups: GroupIndex,
    *,
    norm_by_std: bool = True,
    std_unbiased: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """GRPO's `(s - mean_g) / (std_g + eps)` per row (`[B]`), or `s - mean_g` without std.

    `std_unbiased=False` (default) uses the population std of the group: normalised advantages then
    have unit RMS within every group whatever `n` is (for 0/1 rewards `std = sqrt(p (1 - p))`), and a
    pair [0, 1] gets +-1. The reference used the Bessel-corrected std, which shrinks advantages by
    `sqrt((n-1)/n)` (0.71 for n=2) and is undefined for n=1.
    """
    inv = groups.inverse
    counts = groups.count().to(scores.dtype)
    centered = scores - (groups.sum(scores) / counts)[inv]
    if norm_by_std:
        denom = (counts - 1).clamp(min=1) if std_unbiased else counts
        std = (groups.sum(centered**2) / denom).sqrt()
        centered = centered / (std[inv] + eps)
    return torch.where(_no_signal(scores, groups), torch.zeros_like(centered), centered)


def discounted_returns(rewards: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0) -> torch.Tensor:
    """`G_t = r_t + gamma * G_{t'}`, `t'` the row's next unmasked position; zero outside the mask.

    Masked positions are skipped, not restarts: in a multi-turn episode the tool results between
    the policy's turns are masked, and the return of an earlier turn must still carry the outcome
    reward placed on the last turn (discounted per policy token, tool tokens not counted). Each row
    is one sequence (advantages are computed before packing; right padding holds no reward).
    """
    mask = as_bool_mask(mask)
    returns = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    zero = torch.zeros((), dtype=rewards.dtype, device=rewards.device)
    for t in range(rewards.shape[1] - 1, -1, -1):
        running = torch.where(mask[:, t], rewards[:, t] + gamma * running, running)
        returns[:, t] = torch.where(mask[:, t], running, zero)
    return returns


# -------------------------------------------------------------------------------------- estimators
# (registered by name, with their `group` and `inputs` metadata, in `_registry.py`)


def grpo(
    scores: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: GroupIds,
    *,
    norm_by_std: bool = True,
    std_unbiased: bool = False,
    eps: float = 1e-6,
    std_scope: str = "group",
) -> AdvantageOutput:
    """GRPO (Shao et al., 2024, arXiv:2402.03300): `A_i = (s_i - mean_g) / (std_g + eps)` broadcast
    over the response tokens.

    `norm_by_std=False` gives Dr.GRPO's `s_i - mean_g`. See `group_normalize` for the std choice;
    pass `std_unbiased=True` to reproduce the reference (torch.std, Bessel) exactly.
    `std_scope="batch"` divides by the std of every score in the batch instead of the group's (TRL's
    `scale_rewards="batch"`, after "Tricks or Traps? A Deep Dive into RL for LLM Reasoning",
    arXiv:2508.08221): a group whose scores barely differ is not blown up to unit scale.
    """
    s, mask = _prepare(scores, response_mask, "grpo")
    seq = sequence_scores(s, mask)
    groups = _groups(group_ids, mask.shape[0], mask.device)
    if std_scope == "batch" and norm_by_std:
        centered = group_normalize(seq, groups, norm_by_std=False)
        std = seq.std(correction=1 if std_unbiased else 0) if seq.numel() > 1 else seq.new_zeros(())
        adv = centered / (std + eps)
    elif std_scope in ("group", "batch"):
        adv = group_normalize(seq, groups, norm_by_std=norm_by_std, std_unbiased=std_unbiased, eps=eps)
    else:
        raise ValueError(f"grpo: std_scope must be 'group' or 'batch', got {std_scope!r}")
    dtype = _out_dtype(scores)
    return AdvantageOutput(_broadcast(adv, mask, dtype), _broadcast(seq, mask, dtype))


def dr_grpo(scores: torch.Tensor, response_mask: torch.Tensor, group_ids: GroupIds) -> AdvantageOutput:
    """Dr.GRPO (Liu et al., 2025): `A_i = s_i - mean_g`, no division by the group std (which
    up-weights near-uniform groups). Pair it with `loss_agg_mode="seq-mean-token-sum-norm"`."""
    return grpo(scores, response_mask, group_ids, norm_by_std=False)


def rloo(scores: torch.Tensor, response_mask: torch.Tensor, group_ids: GroupIds) -> AdvantageOutput:
    """RLOO: leave-one-out baseline, `A_i = s_i - (sum_g s - s_i) / (n - 1)` (= n/(n-1) (s_i - mean_g))."""
    s, mask = _prepare(scores, response_mask, "rloo")
    seq = sequence_scores(s, mask)
    groups = _groups(group_ids, mask.shape[0], mask.device)
    counts = groups.count().to(seq.dtype)[groups.inverse]
    baseline = (groups.sum(seq)[groups.inverse] - seq) / (counts - 1).clamp(min=1)
    adv = torch.where(_no_signal(seq, groups), torch.zeros_like(seq), seq - baseline)
    dtype = _out_dtype(scores)
    return AdvantageOutput(_broadcast(adv, mask, dtype), _broadcast(seq, mask, dtype))


def reinforce_plus_plus(
    scores: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: GroupIds | None = None,
    *,
    gamma: float = 1.0,
    whiten_eps: float = 1e-8,
    std_unbiased: bool = False,
) -> AdvantageOutput:
    """REINFORCE++ (Hu et al., 2025, arXiv:2501.03262): discounted token-level return `G_t`,
    whitened over all valid tokens of the batch (population variance, or Bessel-corrected with
    `std_unbiased` as veRL).

    Groups are not used (the baseline is the batch mean). `[B]` scores are placed on the last
    token first, so with `gamma < 1` early tokens receive a discounted share.
    """
    s, mask = _prepare(scores, response_mask, "reinforce_plus_plus")
    returns = discounted_returns(scores_to_token_rewards(s, mask), mask, gamma)
    dtype = _out_dtype(scores)
    return AdvantageOutput(
        masked_whiten(returns, mask, whiten_eps, unbiased=std_unbiased).to(dtype), returns.to(dtype)
    )


def remax(
    scores: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: GroupIds,
    *,
    baseline_scores: torch.Tensor | Mapping[Any, float],
) -> AdvantageOutput:
    """ReMax: `A_t = G_t - b_g`, `b_g` the score of a greedy rollout of the same prompt.

    `G_t` is the undiscounted reward-to-go, i.e. `s_i` on every token for an outcome reward.
    `baseline_scores` is either `[B]` (each row carries its group's baseline; must be constant within
    a group) or a mapping `group id -> baseline`.
    """
    s, mask = _prepare(scores, response_mask, "remax")
    groups = _groups(group_ids, mask.shape[0], mask.device)
    if isinstance(baseline_scores, Mapping):
        ids = group_ids.tolist() if isinstance(group_ids, torch.Tensor) else list(group_ids)
        missing = sorted({str(g) for g in ids if g not in baseline_scores})
        if missing:
            raise KeyError(f"remax: no baseline score for group(s) {', '.join(missing)}")
        base = torch.tensor([float(baseline_scores[g]) for g in ids], dtype=torch.float64, device=mask.device)
    else:
        base = torch.as_tensor(baseline_scores).to(device=mask.device, dtype=torch.float64)
        if base.shape != (mask.shape[0],):
            raise ValueError(f"remax: baseline_scores must be [B]={mask.shape[0]}, got {tuple(base.shape)}")
        if not bool((groups.reduce(base, "amax") == groups.reduce(base, "amin")).all()):
            raise ValueError("remax: baseline_scores differ within a group (misaligned with group_ids?)")
    returns = discounted_returns(scores_to_token_rewards(s, mask), mask, 1.0)
    adv = torch.where(
        mask, returns - base.unsqueeze(-1), torch.zeros((), dtype=returns.dtype, device=returns.device)
    )
    dtype = _out_dtype(scores)
    return AdvantageOutput(adv.to(dtype), returns.to(dtype))


def gdpo(
    scores: Mapping[str, torch.Tensor],
    response_mask: torch.Tensor,
    group_ids: GroupIds,
    *,
    reward_keys: Sequence[str] | None = ("accuracy", "format"),
    std_unbiased: bool = False,
    eps: float = 1e-6,
    whiten_eps: float = 1e-8,
    center: bool = True,
) -> AdvantageOutput:
    """GDPO: GRPO-normalise each reward key within its group separately, sum, whiten over the batch.

    Normalising per key stops a high-variance reward (e.g. accuracy) from drowning a low-variance
    one (format) the way normalising their weighted sum does. The batch whitening is the masked
    token-level mean/variance of the summed advantages (as in the paper and the reference); with
    `center=False` it only rescales, which keeps all-equal groups at exactly 0. `reward_keys=None`
    uses every key of `scores`. A missing or None key is an error, never a silent zero.
    """
    if not isinstance(scores, Mapping):
        raise TypeError("gdpo takes a mapping {reward key: scores}, e.g. {'accuracy': ..., 'format': ...}")
    keys = list(scores) if reward_keys is None else list(reward_keys)
    missing = [k for k in keys if scores.get(k) is None]
    if not keys or missing:
        raise KeyError(f"gdpo: reward key(s) {missing or keys} missing; available: {sorted(scores)}")
    mask = as_bool_mask(response_mask)
    groups = _groups(group_ids, mask.shape[0], mask.device)
    total = torch.zeros(mask.shape[0], dtype=torch.float64, device=mask.device)
    raw_total = torch.zeros_like(total)
    for key in keys:
        seq = sequence_scores(_prepare(scores[key], mask, f"gdpo[{key}]")[0], mask)
        total = total + group_normalize(seq, groups, std_unbiased=std_unbiased, eps=eps)
        raw_total = raw_total + seq
    adv = masked_whiten(_broadcast(total, mask, torch.float64), mask, whiten_eps, center=center)
    dtype = _out_dtype(scores[keys[0]])
    return AdvantageOutput(adv.to(dtype), _broadcast(raw_total, mask, dtype))


def _group_means(seq: torch.Tensor, groups: GroupIndex, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Each row's group mean of ``seq`` (weighted by ``weights``), 0 for a group of one (a lone
    response has no baseline: its advantage is its score, as in veRL)."""
    w = torch.ones_like(seq) if weights is None else weights.to(seq.dtype)
    mean = groups.sum(seq * w) / groups.sum(w).clamp(min=torch.finfo(seq.dtype).tiny)
    return torch.where(groups.count() > 1, mean, torch.zeros_like(mean))[groups.inverse]


def reinforce_plus_plus_baseline(
    scores: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: GroupIds,
    *,
    whiten_eps: float = 1e-8,
    std_unbiased: bool = False,
) -> AdvantageOutput:
    """REINFORCE++-baseline (Hu et al., 2025, arXiv:2501.03262): the group mean is subtracted from
    each score, then the result is whitened over every valid token of the batch (as REINFORCE++:
    population variance, or Bessel-corrected with `std_unbiased` as veRL)."""
    s, mask = _prepare(scores, response_mask, "reinforce_plus_plus_baseline")
    seq = sequence_scores(s, mask)
    groups = _groups(group_ids, mask.shape[0], mask.device)
    centered = _broadcast(seq - _group_means(seq, groups), mask, torch.float64)
    dtype = _out_dtype(scores)
    whitened = masked_whiten(centered, mask, whiten_eps, unbiased=std_unbiased)
    return AdvantageOutput(whitened.to(dtype), _broadcast(seq, mask, dtype))


def grpo_passk(
    scores: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: GroupIds,
    *,
    norm_by_std: bool = True,
    std_unbiased: bool = False,
    eps: float = 1e-6,
) -> AdvantageOutput:
    """Pass@k training (Chen et al., 2025, "Pass@k Training for Adaptively Balancing Exploration and
    Exploitation", arXiv:2508.10751, as veRL's ``grpo_passk``): in each group only the best
    response learns, with `A = s_max - s_second` (divided by the group std + eps with
    `norm_by_std`); every other response gets 0. A group needs at least two responses."""
    s, mask = _prepare(scores, response_mask, "grpo_passk")
    seq = sequence_scores(s, mask)
    groups = _groups(group_ids, mask.shape[0], mask.device)
    adv = torch.zeros_like(seq)
    for g in range(int(groups.inverse.max()) + 1 if seq.numel() else 0):
        rows = (groups.inverse == g).nonzero().flatten()
        if rows.numel() < 2:
            raise ValueError(f"grpo_passk needs at least 2 responses per group, group {g} has {rows.numel()}")
        top = torch.topk(seq[rows], 2)
        gap = top.values[0] - top.values[1]
        if norm_by_std:
            gap = gap / (seq[rows].std(correction=1 if std_unbiased else 0) + eps)
        adv[rows[top.indices[0]]] = gap
    dtype = _out_dtype(scores)
    return AdvantageOutput(_broadcast(adv, mask, dtype), _broadcast(seq, mask, dtype))


def opo(scores: torch.Tensor, response_mask: torch.Tensor, group_ids: GroupIds) -> AdvantageOutput:
    """OPO, on-policy RL with the optimal baseline (Hao et al., 2025, arXiv:2505.23585):
    `A_i = s_i - b_g` with the length-weighted baseline `b_g = sum_j |y_j| s_j / sum_j |y_j|` over
    the group (the variance-minimising baseline when the gradient norm grows with length)."""
    s, mask = _prepare(scores, response_mask, "opo")
    seq = sequence_scores(s, mask)
    groups = _groups(group_ids, mask.shape[0], mask.device)
    lengths = mask.sum(-1).to(seq.dtype)
    dtype = _out_dtype(scores)
    adv = seq - _group_means(seq, groups, lengths)
    return AdvantageOutput(_broadcast(adv, mask, dtype), _broadcast(seq, mask, dtype))


def gpg(
    scores: torch.Tensor, response_mask: torch.Tensor, group_ids: GroupIds, *, f_norm: float = 1.0
) -> AdvantageOutput:
    """GPG, group policy gradient (Chu et al., 2025, arXiv:2504.02546): `A_i = alpha (s_i - mean_g)
    / f_norm`, with `alpha = B / M`, `M` the number of responses in the batch with a non-zero
    score: the gradient of a batch where few responses score is scaled back up. Pair it with the
    plain policy-gradient loss the paper uses, or PPO's."""
    s, mask = _prepare(scores, response_mask, "gpg")
    seq = sequence_scores(s, mask)
    groups = _groups(group_ids, mask.shape[0], mask.device)
    alpha = seq.numel() / max(int(torch.count_nonzero(seq)), 1)
    adv = alpha * (seq - _group_means(seq, groups)) / f_norm
    dtype = _out_dtype(scores)
    return AdvantageOutput(_broadcast(adv, mask, dtype), _broadcast(seq, mask, dtype))
