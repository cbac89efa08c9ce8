"""A sequence-parallel group and the differentiable collectives over it (all-to-all, gathers):
what Ulysses attention, the sharded language model and the split vision tower of
``models/sequence_parallel.py`` exchange, and what the log-prob path gathers (``models/logprobs.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F


@dataclass
class SPGroup:
    """A sequence-parallel group: its process group, size and this rank's index in it."""

    group: object
    size: int
    rank: int


class AllToAll(torch.autograd.Function):
    """Split ``x`` along ``scatter_dim`` into the group's ranks and concatenate what they send
    along ``gather_dim``; the backward is the reverse exchange."""

    @staticmethod
    def forward(ctx, x, sp: SPGroup, scatter_dim: int, gather_dim: int):
        ctx.sp, ctx.dims = sp, (scatter_dim, gather_dim)
        return all_to_all(x, sp, scatter_dim, gather_dim)

    @staticmethod
    def backward(ctx, grad):
        scatter_dim, gather_dim = ctx.dims
        return all_to_all(grad, ctx.sp, gather_dim, scatter_dim), None, None, None


def all_to_all(x: torch.Tensor, sp: SPGroup, scatter_dim: int, gather_dim: int) -> torch.Tensor:
    inputs = [t.contiguous() for t in x.chunk(sp.size, dim=scatter_dim)]
    outputs = [torch.empty_like(inputs[0]) for _ in range(sp.size)]
    dist.all_to_all(outputs, inputs, group=sp.group)
    return torch.cat(outputs, dim=gather_dim)


class Gather(torch.autograd.Function):
    """Every rank's equal-width shard concatenated along ``dim``.

    ``summed``: the ranks then use the result differently (the hidden states: each rank's LM head
    reads its own share of the positions), so the backward sums the gradient over the group before
    keeping this rank's slice. Otherwise every rank computes the same function of the result (the
    log-probs: one loss), and the backward keeps this rank's slice as it is."""

    @staticmethod
    def forward(ctx, x, sp: SPGroup, dim: int, summed: bool):
        ctx.sp, ctx.dim, ctx.width, ctx.summed = sp, dim, x.shape[dim], summed
        parts = [torch.empty_like(x) for _ in range(sp.size)]
        dist.all_gather(parts, x.contiguous(), group=sp.group)
        return torch.cat(parts, dim=dim)

    @staticmethod
    def backward(ctx, grad):
        if ctx.summed:
            grad = grad.contiguous()
            dist.all_reduce(grad, group=ctx.sp.group)
        return grad.narrow(ctx.dim, ctx.sp.rank * ctx.width, ctx.width), None, None, None


def shard_bounds(length: int, sp: SPGroup) -> tuple[int, int]:
    """This rank's contiguous share ``[start, stop)`` of ``length`` positions padded to a
    multiple of the group size (``stop`` may pass ``length``: padding)."""
    chunk = -(-length // sp.size)
    return sp.rank * chunk, (sp.rank + 1) * chunk


def gather_tokens(values: torch.Tensor, sp: SPGroup, length: int) -> torch.Tensor:
    """Per-token values ``[B, chunk]`` of this rank's share of ``length`` positions
    (:func:`shard_bounds`) -> ``[B, length]`` on every rank, differentiable (one loss on all)."""
    return Gather.apply(values, sp, 1, False)[:, :length]


class GatherShared(torch.autograd.Function):
    """Every rank's rows (``sizes[r]`` of them, in rank order) concatenated. Each rank then uses
    the result differently (its own sequence shard), so the backward sums the gradient over the
    group and keeps this rank's rows."""

    @staticmethod
    def forward(ctx, x, sp: SPGroup, sizes: list[int]):
        ctx.sp, ctx.sizes = sp, sizes
        width = max(sizes)
        padded = F.pad(x, (0, 0, 0, width - x.shape[0])).contiguous()
        parts = [torch.empty_like(padded) for _ in range(sp.size)]
        dist.all_gather(parts, padded, group=sp.group)
        return torch.cat([part[:n] for part, n in zip(parts, sizes, strict=True)])

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous()
        dist.all_reduce(grad, group=ctx.sp.group)
        start = sum(ctx.sizes[: ctx.sp.rank])
        return grad[start : start + ctx.sizes[ctx.sp.rank]], None, None
