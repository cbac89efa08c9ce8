"""Reduce a per-token loss `[B, T]` to the scalar to backpropagate, with exact global-batch weighting.

Modes (veRL's names), for a mini-batch (one optimizer step) of sequences `i` with `n_i` valid tokens,
`N_tok = sum_i n_i` valid tokens and `N_seq` sequences:

* `token-mean` (DAPO): `sum_{i,t} l_it / N_tok`; every token weighs the same, so long responses
  count more in total.
* `seq-mean-token-mean` (original GRPO): `(1/N_seq) sum_i (sum_t l_it / n_i)`; every sequence weighs
  the same, a token of a short response weighs more (the length bias Dr.GRPO points out).
* `seq-mean-token-sum`: `(1/N_seq) sum_i sum_t l_it`.
* `seq-mean-token-sum-norm` (Dr.GRPO): `(1/N_seq) sum_i sum_t l_it / L`, `L` a *constant* (the max
  response length, `norm_length`), so no per-sample length normalisation at all. It must not be the
  padded width of the micro-batch, which changes from micro-batch to micro-batch.

Global weighting. A mini-batch is usually split into micro-batches (gradient accumulation) and over
data-parallel ranks. The denominators `N_tok` and `N_seq` belong to the whole mini-batch, so the
caller computes them up front (`GlobalBatchStats.from_masks(...)`, then `.all_reduce()` across ranks)
and passes them to every `aggregate_loss` call. Each micro-batch then returns its exact share of the
global loss: the sum over micro-batches (and ranks) of the returned losses, and of their gradients,
equals the full mini-batch aggregate and its gradient, whatever the micro-batch sizes and lengths.
DDP/FSDP *average* gradients over ranks, so each rank's loss is multiplied by `dp_size` to turn that
average back into a sum. (The reference rescaled every micro-batch by its token share in every mode,
which silently re-weighted the sequence modes by length.)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from ._registry import LOSS_AGGREGATIONS
from .masked import as_bool_mask, masked_sum, sequence_lengths

# the built-in modes (each registered by name in `_registry.py`, its reducer defined below)
LOSS_AGG_MODES = (
    "token-mean",
    "token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)


def normalize_loss_agg_mode(mode: str) -> str:
    """Canonical mode name (underscores accepted for hyphens); raises `ValueError` for unknown modes."""
    return LOSS_AGGREGATIONS.canonical(mode)


@dataclass(frozen=True)
class GlobalBatchStats:
    """Denominators of one optimizer step, known before its micro-batches are processed.

    Attributes:
        num_tokens: valid (response) tokens in the whole mini-batch, all micro-batches and ranks.
        num_sequences: sequences with at least one valid token, likewise global.
        dp_size: number of data-parallel ranks whose gradients are *averaged* by the all-reduce
            (1 when gradients are summed, or without data parallelism).
    """

    num_tokens: int
    num_sequences: int
    dp_size: int = 1

    def __post_init__(self) -> None:
        if self.num_tokens < 0 or self.num_sequences < 0 or self.dp_size < 1:
            raise ValueError(f"invalid GlobalBatchStats {self}")

    @classmethod
    def from_mask(cls, response_mask: torch.Tensor, dp_size: int = 1) -> GlobalBatchStats:
        """Stats of one (local) mask `[B, T]`."""
        return cls.from_masks([response_mask], dp_size)

    @classmethod
    def from_masks(cls, response_masks: Iterable[torch.Tensor], dp_size: int = 1) -> GlobalBatchStats:
        """Stats of a mini-batch given as the masks of its micro-batches (any sizes and widths)."""
        tokens = sequences = 0
        for mask in response_masks:
            lengths = sequence_lengths(mask)
            tokens += int(lengths.sum())
            sequences += int((lengths > 0).sum())
        return cls(tokens, sequences, dp_size)

    def all_reduce(
        self, group: object | None = None, device: torch.device | str | None = None
    ) -> GlobalBatchStats:
        """Sum the counts over the ranks of `group` (no-op without an initialised process group).

        `dp_size` becomes the group's size. `device` defaults to the current CUDA device for NCCL.
        """
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()):
            return self
        if device is None:
            device = f"cuda:{torch.cuda.current_device()}" if dist.get_backend(group) == "nccl" else "cpu"
        counts = torch.tensor([self.num_tokens, self.num_sequences], dtype=torch.int64, device=device)
        dist.all_reduce(counts, group=group)
        return GlobalBatchStats(int(counts[0]), int(counts[1]), dist.get_world_size(group))


def aggregate_loss(
    loss: torch.Tensor,
    response_mask: torch.Tensor,
    mode: str = "token-mean",
    *,
    global_stats: GlobalBatchStats | None = None,
    norm_length: int | None = None,
) -> torch.Tensor:
    """Reduce `loss` `[B, T]` to a scalar with `mode` (see the module docstring).

    Args:
        loss: per-token loss; values outside the mask are ignored (selected out, so -inf/NaN
            padding is harmless).
        response_mask: `[B, T]` validity mask.
        mode: one of `LOSS_AGG_MODES`.
        global_stats: denominators of the whole mini-batch. `None` normalises by this call's own
            batch (fine when there is one micro-batch on one rank).
        norm_length: the constant `L` of `seq-mean-token-sum-norm` (usually the max response length).

    Returns:
        This micro-batch's share of the mini-batch loss; summing the shares of all micro-batches
        (and dividing by `dp_size` across ranks) gives the mini-batch aggregate.
    """
    reduce = LOSS_AGGREGATIONS.get(mode)
    mask = as_bool_mask(response_mask)
    if loss.shape != mask.shape:
        raise ValueError(f"loss {tuple(loss.shape)} and response_mask {tuple(mask.shape)} differ in shape")
    stats = global_stats if global_stats is not None else GlobalBatchStats.from_mask(mask)
    return reduce(loss, mask, stats, norm_length)


# Reducers of the modes: (loss [B, T], bool mask [B, T], global stats, norm_length) -> this
# micro-batch's share. The dp_size factor turns DDP/FSDP's gradient average back into a sum.


def _token_mean(loss, mask, stats: GlobalBatchStats, norm_length: int | None) -> torch.Tensor:
    return masked_sum(loss, mask) * (float(stats.dp_size) / max(stats.num_tokens, 1))


def _token_sum(loss, mask, stats: GlobalBatchStats, norm_length: int | None) -> torch.Tensor:
    """The sum over every valid token of the global batch (no length or count normalisation: the
    loss, and the gradient, grow with the batch's tokens; scale the learning rate accordingly)."""
    return masked_sum(loss, mask) * float(stats.dp_size)


def _seq_mean_token_mean(loss, mask, stats: GlobalBatchStats, norm_length: int | None) -> torch.Tensor:
    per_sequence = masked_sum(loss, mask, dim=-1) / sequence_lengths(mask).clamp(min=1).to(loss.dtype)
    return per_sequence.sum() * (float(stats.dp_size) / max(stats.num_sequences, 1))


def _seq_mean_token_sum(loss, mask, stats: GlobalBatchStats, norm_length: int | None) -> torch.Tensor:
    return masked_sum(loss, mask, dim=-1).sum() * (float(stats.dp_size) / max(stats.num_sequences, 1))


def _seq_mean_token_sum_norm(loss, mask, stats: GlobalBatchStats, norm_length: int | None) -> torch.Tensor:
    if norm_length is None or norm_length <= 0:
        raise ValueError(
            "seq-mean-token-sum-norm needs a positive constant norm_length (the max response length)"
        )
    scale = float(stats.dp_size) / norm_length
    return masked_sum(loss, mask, dim=-1).sum() * (scale / max(stats.num_sequences, 1))
