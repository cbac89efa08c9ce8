"""DAPO dynamic sampling (online group filtering).

A group whose responses all get the same reward has zero GRPO advantage everywhere: it costs a
forward/backward pass and only dilutes the batch. DAPO generates more prompts and keeps only groups
with signal. Two criteria:

* `"std"` (DAPO paper, default): keep groups whose rewards are not all equal.
* `"mean"` (the reference's form): keep groups whose mean reward lies strictly inside
  `(low, high)`, e.g. (0.01, 0.99) on a 0/1 accuracy.

A group of one response is never "varied", so `"std"` drops it. `DynamicSampler` is the
bookkeeping the trainer needs to accumulate kept groups over several generation rounds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import torch

from ._registry import FILTERS
from .masked import GroupIndex, group_index

# the built-in criteria (each registered by name in `_registry.py`, its rule defined below)
FILTER_CRITERIA = ("std", "mean")
T = TypeVar("T")


@dataclass(frozen=True)
class GroupFilterResult:
    """Which rows survive the filter.

    Attributes:
        keep: `[B]` bool, True for rows of kept groups.
        kept_groups / dropped_groups: group counts.
        group_rank: `[B]` int64, the rank of each row's group by first appearance (0, 1, ...).
    """

    keep: torch.Tensor
    kept_groups: int
    dropped_groups: int
    group_rank: torch.Tensor

    @property
    def kept_rows(self) -> int:
        return int(self.keep.sum())

    @property
    def dropped_rows(self) -> int:
        return int((~self.keep).sum())


def _select_scores(scores: torch.Tensor | Mapping[str, torch.Tensor], key: str | None) -> torch.Tensor:
    if isinstance(scores, Mapping):
        if key is None or scores.get(key) is None:
            raise KeyError(f"filter key {key!r} not among the reward keys {sorted(scores)}")
        scores = scores[key]
    values = torch.as_tensor(scores, dtype=torch.float64)
    if values.dim() != 1:
        raise ValueError(f"filtering takes per-sequence scores [B], got shape {tuple(values.shape)}")
    return values


def _first_appearance_rank(groups: GroupIndex) -> torch.Tensor:
    """Rank of each group by the row where it first appears, per row."""
    rows = torch.arange(groups.inverse.numel(), device=groups.inverse.device)
    first_row = groups.reduce(rows, "amin")
    rank_of_group = torch.empty_like(first_row)
    rank_of_group[torch.argsort(first_row)] = torch.arange(groups.num_groups, device=first_row.device)
    return rank_of_group[groups.inverse]


def filter_groups(
    scores: torch.Tensor | Mapping[str, torch.Tensor],
    group_ids: torch.Tensor | Sequence[Any],
    *,
    criterion: str = "std",
    low: float = 0.01,
    high: float = 0.99,
    key: str | None = None,
) -> GroupFilterResult:
    """Keep the groups with signal (see the module docstring).

    Args:
        scores: per-sequence rewards `[B]`, or a mapping of reward keys (then `key` picks one).
        group_ids: `[B]` group of each row (the prompt's uid).
        criterion: `"std"` or `"mean"`.
        low, high: the open interval of the `"mean"` criterion.
        key: reward key to filter on when `scores` is a mapping (e.g. "accuracy" or "overall").
    """
    keep_groups = FILTERS.get(criterion)
    values = _select_scores(scores, key)
    groups = group_index(group_ids, device=values.device)
    if groups.inverse.numel() != values.numel():
        raise ValueError(f"group_ids has {groups.inverse.numel()} entries for {values.numel()} scores")
    keep_group = keep_groups(values, groups, low, high)
    kept = int(keep_group.sum())
    return GroupFilterResult(
        keep_group[groups.inverse], kept, groups.num_groups - kept, _first_appearance_rank(groups)
    )


# Criteria: (scores [B], groups, low, high) -> [num_groups] bool, True for the groups to keep.


def _keep_varied(values: torch.Tensor, groups: GroupIndex, low: float, high: float) -> torch.Tensor:
    return groups.reduce(values, "amax") > groups.reduce(values, "amin")


def _keep_mean_inside(values: torch.Tensor, groups: GroupIndex, low: float, high: float) -> torch.Tensor:
    mean = groups.sum(values) / groups.count().to(values.dtype)
    return (mean > low) & (mean < high)


@dataclass(frozen=True)
class RoundSummary:
    """What one `DynamicSampler.add_round` call did (for logging) and what to do next."""

    round: int
    kept_groups: int
    dropped_groups: int
    total_kept_groups: int
    done: bool
    exhausted: bool

    @property
    def should_continue(self) -> bool:
        return not (self.done or self.exhausted)


@dataclass(frozen=True)
class Selected(Generic[T]):
    """Rows to take from one round's batch (`payload` is whatever the trainer passed in)."""

    payload: T | None
    rows: torch.Tensor


@dataclass
class DynamicSampler(Generic[T]):
    """Accumulate kept groups over generation rounds until `target_groups` (pure bookkeeping).

    Usage::

        sampler = DynamicSampler(target_groups=256, max_tries=20)
        while True:
            batch = generate_and_score()
            if not sampler.add_round(batch.scores, batch.uids, payload=batch).should_continue:
                break
        if not sampler.done: ...  # budget exhausted: train on a smaller batch or raise
        parts = [s.payload.take(s.rows) for s in sampler.selection()]

    Attributes:
        target_groups: groups wanted for one training batch (the rollout batch size in prompts).
        max_tries: generation rounds allowed; `<= 0` means unlimited.
        criterion, low, high, key: as in `filter_groups`.
    """

    target_groups: int
    max_tries: int = 20
    criterion: str = "std"
    low: float = 0.01
    high: float = 0.99
    key: str | None = None
    rounds: int = field(default=0, init=False)
    total_kept_groups: int = field(default=0, init=False)
    total_dropped_groups: int = field(default=0, init=False)
    _parts: list[tuple[T | None, GroupFilterResult]] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.target_groups <= 0:
            raise ValueError(f"target_groups must be positive, got {self.target_groups}")
        FILTERS.canonical(self.criterion)  # an unknown name raises, listing the known ones

    @property
    def done(self) -> bool:
        return self.total_kept_groups >= self.target_groups

    @property
    def exhausted(self) -> bool:
        return not self.done and self.max_tries > 0 and self.rounds >= self.max_tries

    def add_round(
        self,
        scores: torch.Tensor | Mapping[str, torch.Tensor],
        group_ids: torch.Tensor | Sequence[Any],
        payload: T | None = None,
    ) -> RoundSummary:
        """Filter one round of groups and record the survivors. Rounds after `done` are refused."""
        if self.done:
            raise RuntimeError("DynamicSampler already has enough groups; call selection() or reset()")
        result = filter_groups(
            scores, group_ids, criterion=self.criterion, low=self.low, high=self.high, key=self.key
        )
        self.rounds += 1
        self.total_kept_groups += result.kept_groups
        self.total_dropped_groups += result.dropped_groups
        self._parts.append((payload, result))
        return RoundSummary(
            self.rounds,
            result.kept_groups,
            result.dropped_groups,
            self.total_kept_groups,
            self.done,
            self.exhausted,
        )

    def selection(self) -> list[Selected[T]]:
        """Rows of the kept groups, per round, truncated to `target_groups` whole groups.

        Groups are taken in round order, then by first appearance within a round; row indices are
        ascending, so groups stored contiguously stay contiguous. Rounds contributing nothing are
        omitted.
        """
        out: list[Selected[T]] = []
        remaining = self.target_groups
        for payload, result in self._parts:
            if remaining <= 0:
                break
            kept_ranks = torch.unique(result.group_rank[result.keep])  # sorted ascending
            chosen = kept_ranks[:remaining]
            if chosen.numel() == 0:
                continue
            rows = torch.nonzero(result.keep & torch.isin(result.group_rank, chosen)).flatten()
            out.append(Selected(payload, rows))
            remaining -= chosen.numel()
        return out

    def reset(self) -> None:
        """Forget all rounds (start the next training batch)."""
        self.rounds = self.total_kept_groups = self.total_dropped_groups = 0
        self._parts.clear()
