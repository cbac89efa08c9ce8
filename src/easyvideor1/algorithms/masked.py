"""Masked reductions and group bookkeeping shared by the algorithms.

Every masked operation selects with `torch.where` instead of multiplying by the mask: padding
positions may hold `-inf` log-probs (banned tokens) or garbage, and `-inf * 0` is NaN, which would
poison the sum and, through backward, the gradients.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


def as_bool_mask(mask: torch.Tensor) -> torch.Tensor:
    """A 0/1 (any dtype) or boolean mask as a boolean tensor."""
    return mask if mask.dtype == torch.bool else mask != 0


def masked_sum(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of `values` where `mask` is set (over `dim`, or everything when `dim` is None)."""
    selected = torch.where(
        as_bool_mask(mask), values, torch.zeros((), dtype=values.dtype, device=values.device)
    )
    return selected.sum() if dim is None else selected.sum(dim)


def masked_mean(values: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean over the masked positions; 0 (not NaN) where nothing is selected."""
    count = as_bool_mask(mask).sum() if dim is None else as_bool_mask(mask).sum(dim)
    return masked_sum(values, mask, dim) / count.clamp(min=1).to(values.dtype)


def masked_var(values: torch.Tensor, mask: torch.Tensor, unbiased: bool = False) -> torch.Tensor:
    """Variance of the masked positions (population variance unless `unbiased`); 0 for < 2 elements."""
    mean = masked_mean(values, mask)
    count = as_bool_mask(mask).sum()
    sq = masked_sum((values - mean) ** 2, mask)
    denom = (count - 1) if unbiased else count
    return sq / denom.clamp(min=1).to(values.dtype)


def masked_whiten(
    values: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8, center: bool = True, unbiased: bool = False
) -> torch.Tensor:
    """`(values - mean) / sqrt(var + eps)` over the masked positions; zero elsewhere.

    Uses the population variance by default, so the result has mean 0 and (population) variance
    `var / (var + eps)` ~ 1 over the valid positions; `unbiased=True` uses Bessel's correction (as
    veRL's `masked_whiten`). A constant input maps to exactly 0. `center=False` only rescales
    (keeps the sign of every value).
    """
    bool_mask = as_bool_mask(mask)
    zero = torch.zeros((), dtype=values.dtype, device=values.device)
    mean = masked_mean(values, mask)
    var = masked_var(values, mask, unbiased=unbiased)
    shifted = values - mean if center else values
    out = shifted * torch.rsqrt(var + eps)
    if center:
        # A constant input carries no signal, but its mean may differ from the values by rounding and
        # dividing that residue by sqrt(eps) would make it a non-zero advantage: force exact zeros.
        lo = torch.where(bool_mask, values, torch.full_like(zero, float("inf"))).amin()
        hi = torch.where(bool_mask, values, torch.full_like(zero, float("-inf"))).amax()
        bool_mask = bool_mask & (hi > lo)
    return torch.where(bool_mask, out, zero)


def sequence_lengths(response_mask: torch.Tensor) -> torch.Tensor:
    """Valid tokens per sequence, `[B]` int64."""
    return as_bool_mask(response_mask).sum(-1)


def last_token_index(response_mask: torch.Tensor) -> torch.Tensor:
    """Index of the last valid token of each row (0 for an empty row), `[B]` int64."""
    mask = as_bool_mask(response_mask)
    positions = torch.arange(mask.shape[-1], device=mask.device).expand_as(mask)
    return torch.where(mask, positions, torch.zeros_like(positions)).amax(-1)


def scores_to_token_rewards(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Place per-sequence scores `[B]` on each row's last valid token, giving token rewards `[B, T]`.

    A `[B, T]` input is returned masked (it already is token-level). This is the outcome-reward
    convention of the reference: the score is the reward of the final token, and
    `score = sum_t r_t` recovers it.
    """
    mask = as_bool_mask(response_mask)
    if scores.dim() == 2:
        if scores.shape != mask.shape:
            raise ValueError(f"token rewards {tuple(scores.shape)} do not match the mask {tuple(mask.shape)}")
        return torch.where(mask, scores, torch.zeros((), dtype=scores.dtype, device=scores.device))
    if scores.dim() != 1 or scores.shape[0] != mask.shape[0]:
        raise ValueError(f"scores must be [B] or [B, T] with B={mask.shape[0]}, got {tuple(scores.shape)}")
    rewards = torch.zeros(mask.shape, dtype=scores.dtype, device=scores.device)
    has_tokens = mask.any(-1)
    rows = torch.arange(mask.shape[0], device=mask.device)[has_tokens]
    rewards[rows, last_token_index(mask)[has_tokens]] = scores[has_tokens]
    return rewards


def sequence_scores(scores: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """Per-sequence scores `[B]`: the input itself, or the masked sum over tokens of `[B, T]` rewards."""
    return masked_sum(scores, response_mask, dim=-1) if scores.dim() == 2 else scores


@dataclass(frozen=True)
class GroupIndex:
    """Rows mapped to groups: `inverse[b]` is the group (0..num_groups-1) of row `b`."""

    inverse: torch.Tensor
    num_groups: int

    def count(self) -> torch.Tensor:
        """Rows per group, `[G]` int64."""
        return torch.bincount(self.inverse, minlength=self.num_groups)

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """Per-group sums of per-row `values` `[B]` -> `[G]`."""
        return torch.zeros(self.num_groups, dtype=values.dtype, device=values.device).index_add_(
            0, self.inverse, values
        )

    def reduce(self, values: torch.Tensor, op: str) -> torch.Tensor:
        """Per-group `amin` / `amax` of per-row `values`."""
        out = torch.zeros(self.num_groups, dtype=values.dtype, device=values.device)
        return out.scatter_reduce(0, self.inverse, values, op, include_self=False)


def group_index(group_ids: torch.Tensor | Sequence[Any], device: torch.device | None = None) -> GroupIndex:
    """Map arbitrary group ids (ints, or hashables such as uid strings) to dense indices.

    Ids need not be contiguous or sorted; rows with equal ids form one group (the `n` responses
    to one prompt).
    """
    if isinstance(group_ids, torch.Tensor):
        if group_ids.dim() != 1:
            raise ValueError(f"group_ids must be 1-D, got shape {tuple(group_ids.shape)}")
        uniq, inverse = torch.unique(group_ids, return_inverse=True)
        return GroupIndex(inverse.to(device or group_ids.device), int(uniq.numel()))
    dense: dict[Any, int] = {}
    inverse_list = [dense.setdefault(g, len(dense)) for g in group_ids]
    return GroupIndex(torch.tensor(inverse_list, dtype=torch.long, device=device), len(dense))
