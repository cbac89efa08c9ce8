"""Log-probs of chosen tokens and per-position entropy from logits, a chunk of positions at a time.

The one place for this math: the trainer's log-probs (``models.logprobs``: policy, reference,
packed rows, sequence-parallel shards) and the public ``algorithms.logits`` both call
``logprobs_and_entropy``. It lives in ``models/`` because ``models`` sits below every other
package (``data`` and ``rollout`` import it), so it may not import ``algorithms``; ``algorithms``
may import it.

Why chunks: a float32 copy of one micro-batch's logits is large (4,096 positions x 151,936 ids is
2.5 GB), and the plain formula (float cast, banned-id fill, log-softmax, exp, products) makes about
eight such copies, several of which autograd keeps until the backward. Here only ``CHUNK_BYTES``
of positions are cast to float32 at a time, the forward keeps nothing for the backward but the
logits themselves (which the model holds anyway) and one entropy value per position, and the
backward recomputes each chunk's softmax and writes straight into the logits' gradient. Peak: the
logits, their gradient, and a few chunk-sized float32 buffers.

Semantics:

- the logits are divided by ``temperature`` in float32 (float64 logits stay float64, for
  ``gradcheck``), then the ``banned`` ids are set to -inf (the sampler never draws them, so the
  training distribution excludes them too);
- a chosen id whose logit is -inf gets log-prob -inf (a sampled banned token stays visible);
- a position whose logits are all -inf (padding) gets log-prob 0 and entropy 0, and no gradient;
- entropy skips the -inf entries (their p is 0: never ``0 * -inf = NaN``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import torch
from torch.autograd.function import once_differentiable

# Float32 bytes of one chunk of positions (rows x vocabulary x 4): 128 MiB is 220 positions of a
# 151,936-id vocabulary. The forward and the backward each hold two chunk-sized buffers at once, so
# the working set stays near 256 MiB whatever the response length, while a chunk is still large
# enough for the per-chunk Python loop to cost nothing next to the arithmetic.
CHUNK_BYTES = 128 * 2**20


def chunk_rows(vocab: int) -> int:
    """Positions per chunk: as many as fit in ``CHUNK_BYTES`` of float32 (at least one)."""
    return max(1, CHUNK_BYTES // (4 * vocab))


def logprobs_and_entropy(
    logits: torch.Tensor,
    ids: torch.Tensor,
    *,
    banned: Sequence[int] | None = None,
    temperature: float = 1.0,
    rows: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(ids), entropy), both of ``ids``' shape, from ``logits [..., V]`` (see the module
    docstring for the semantics). Both are differentiable; ``rows`` overrides ``chunk_rows``."""
    if logits.shape[:-1] != ids.shape:
        raise ValueError(f"logits {tuple(logits.shape)} do not match ids {tuple(ids.shape)}")
    banned_ids = torch.tensor(sorted(set(banned)), device=logits.device) if banned else None
    rows = rows or chunk_rows(logits.shape[-1])
    return _LogprobsAndEntropy.apply(logits, ids.long(), banned_ids, float(temperature), rows)


def _row_chunks(shape: torch.Size, rows: int) -> Iterator[tuple]:
    """Indices that cut a ``shape`` (the positions) into views of at most ``rows`` positions.

    Chunks run along the last dimension within each leading index, so that every chunk is a view
    even of non-contiguous logits (``out.logits[:, :T]``, an ``expand``ed tensor): flattening those
    to rows would copy them whole."""
    *leading, length = shape
    for prefix in itertools.product(*(range(n) for n in leading)):
        for start in range(0, length, rows):
            yield (*prefix, slice(start, start + rows))


def _log_softmax(chunk: torch.Tensor, banned: torch.Tensor | None, temperature: float):
    """(log-softmax of one chunk's scaled and banned logits, which rows have a finite logit)."""
    scaled = chunk.to(torch.promote_types(chunk.dtype, torch.float32), copy=True)
    if temperature != 1.0:
        scaled.div_(temperature)
    if banned is not None:
        scaled.index_fill_(-1, banned, float("-inf"))
    live = ~torch.isneginf(scaled.amax(-1))
    # an all -inf row would give NaN: a uniform row instead, whose results are zeroed by the callers
    scaled.masked_fill_(~live.unsqueeze(-1), 0.0)
    return torch.log_softmax(scaled, dim=-1), live


def _neg_p_log_p(logp_all: torch.Tensor) -> torch.Tensor:
    """-p log p of every entry, in a new buffer (``logp_all`` is kept). Where log p is -inf, p is 0
    and the product is 0 * -inf = NaN: those entries add nothing, so they become 0."""
    return logp_all.exp().mul_(logp_all).nan_to_num_(nan=0.0).neg_()


class _LogprobsAndEntropy(torch.autograd.Function):
    """``logprobs_and_entropy`` with a hand-written backward that never holds a full float32 copy.

    With p = softmax(z / temperature), l = log p and H = -sum p l, per position:
    d l[id] / dz = (onehot(id) - p) / temperature and dH / dz = -p (l + H) / temperature; banned
    columns get no gradient (they are constants, -inf), nor do all -inf rows.

    Each chunk's work is a function of its own, so that its buffers are freed when it returns,
    before the next chunk's are made.
    """

    @staticmethod
    def forward(ctx, logits, ids, banned, temperature, rows):
        dtype = torch.promote_types(logits.dtype, torch.float32)
        logp = torch.empty(ids.shape, dtype=dtype, device=logits.device)
        entropy = torch.empty_like(logp)
        for index in _row_chunks(ids.shape, rows):
            logp[index], entropy[index] = _chunk_values(logits[index], ids[index], banned, temperature)
        ctx.save_for_backward(logits, ids, entropy)
        ctx.banned, ctx.temperature, ctx.rows = banned, temperature, rows
        ctx.set_materialize_grads(False)  # an unused output's gradient arrives as None
        return logp, entropy

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_logp, grad_entropy):
        logits, ids, entropy = ctx.saved_tensors
        grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        for index in _row_chunks(ids.shape, ctx.rows):
            grad[index] = _chunk_grad(
                logits, ids, entropy, grad_logp, grad_entropy, index, ctx.banned, ctx.temperature
            )
        return grad, None, None, None, None


def _chunk_values(chunk, ids, banned, temperature) -> tuple[torch.Tensor, torch.Tensor]:
    """(log p(ids), entropy) of one chunk of positions; two chunk-sized buffers at most."""
    logp_all, live = _log_softmax(chunk, banned, temperature)
    chosen = logp_all.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    entropy = _neg_p_log_p(logp_all).sum(-1)
    return torch.where(live, chosen, 0.0), torch.where(live, entropy, 0.0)


def _chunk_grad(logits, ids, entropy, grad_logp, grad_entropy, index, banned, temperature):
    """The gradient of the logits' chunk ``index`` from the incoming gradients of its log-probs
    and entropies (None: that output was not used); two chunk-sized buffers at most."""
    logp_all, live = _log_softmax(logits[index], banned, temperature)
    p = logp_all.exp()
    entropy_grad = None
    if grad_entropy is not None:
        # -p (l + H), in logp_all's buffer (0 * -inf where p is 0: that entry adds nothing)
        minus_g = -_live_column(grad_entropy[index], live)
        entropy_grad = logp_all.add_(entropy[index].unsqueeze(-1)).mul_(p).nan_to_num_(nan=0.0)
        entropy_grad.mul_(minus_g)
    g = _live_column(None if grad_logp is None else grad_logp[index], live).to(p.dtype)
    chunk_grad = p.mul_(-g).scatter_add_(-1, ids[index].unsqueeze(-1), g)  # in p's buffer
    if entropy_grad is not None:
        chunk_grad.add_(entropy_grad)
    if banned is not None:
        chunk_grad.index_fill_(-1, banned, 0.0)
    if temperature != 1.0:
        chunk_grad.div_(temperature)
    return chunk_grad


def _live_column(grad: torch.Tensor | None, live: torch.Tensor) -> torch.Tensor:
    """One chunk's incoming gradient as a ``[rows, 1]`` column, 0 on all -inf rows (and everywhere
    when the output was not used)."""
    if grad is None:
        return torch.zeros((*live.shape, 1), device=live.device)
    return torch.where(live, grad, 0.0).unsqueeze(-1)


def logprobs_at(
    logits: torch.Tensor,
    ids: torch.Tensor,
    *,
    banned: Sequence[int] | None = None,
    temperature: float = 1.0,
    rows: int | None = None,
) -> torch.Tensor:
    """log p of several ids per position, ``[..., k]`` from ``logits [..., V]`` and ``ids [..., k]``
    (the same semantics as :func:`logprobs_and_entropy`: scaled, banned ids at -inf, 0 on all -inf
    rows), differentiable with the same chunked backward: a student's log-probs of a teacher's
    top-k ids."""
    if logits.shape[:-1] != ids.shape[:-1]:
        raise ValueError(f"logits {tuple(logits.shape)} do not match ids {tuple(ids.shape)}")
    banned_ids = torch.tensor(sorted(set(banned)), device=logits.device) if banned else None
    rows = rows or chunk_rows(logits.shape[-1])
    return _LogprobsAt.apply(logits, ids.long(), banned_ids, float(temperature), rows)


@torch.no_grad()
def top_logprobs(
    logits: torch.Tensor,
    k: int,
    *,
    banned: Sequence[int] | None = None,
    temperature: float = 1.0,
    rows: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids, log p), each ``[..., k]``: the ``k`` most likely ids of each position, most likely
    first (a teacher's top-k), without gradient; all -inf rows give id 0 and log p 0."""
    banned_ids = torch.tensor(sorted(set(banned)), device=logits.device) if banned else None
    rows = rows or chunk_rows(logits.shape[-1])
    dtype = torch.promote_types(logits.dtype, torch.float32)
    top = torch.zeros((*logits.shape[:-1], k), dtype=dtype, device=logits.device)
    ids = torch.zeros(top.shape, dtype=torch.long, device=logits.device)
    for index in _row_chunks(logits.shape[:-1], rows):
        logp_all, live = _log_softmax(logits[index], banned_ids, temperature)
        values, chosen = logp_all.topk(k, dim=-1)
        top[index] = torch.where(live.unsqueeze(-1), values, 0.0)
        ids[index] = torch.where(live.unsqueeze(-1), chosen, 0)
    return ids, top


class _LogprobsAt(torch.autograd.Function):
    """``logprobs_at``: per position, d l[id_j] / dz = (onehot(id_j) - p) / temperature, so the
    logits' gradient is ``(scatter(g) - p * sum_j g_j) / temperature``, a chunk at a time."""

    @staticmethod
    def forward(ctx, logits, ids, banned, temperature, rows):
        dtype = torch.promote_types(logits.dtype, torch.float32)
        logp = torch.empty(ids.shape, dtype=dtype, device=logits.device)
        for index in _row_chunks(ids.shape[:-1], rows):
            logp_all, live = _log_softmax(logits[index], banned, temperature)
            logp[index] = torch.where(live.unsqueeze(-1), logp_all.gather(-1, ids[index]), 0.0)
        ctx.save_for_backward(logits, ids)
        ctx.banned, ctx.temperature, ctx.rows = banned, temperature, rows
        return logp

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_logp):
        logits, ids = ctx.saved_tensors
        grad = torch.empty(logits.shape, dtype=logits.dtype, device=logits.device)
        for index in _row_chunks(ids.shape[:-1], ctx.rows):
            logp_all, live = _log_softmax(logits[index], ctx.banned, ctx.temperature)
            g = torch.where(live.unsqueeze(-1), grad_logp[index], 0.0).to(logp_all.dtype)
            chunk_grad = logp_all.exp_().mul_(-g.sum(-1, keepdim=True)).scatter_add_(-1, ids[index], g)
            if ctx.banned is not None:
                chunk_grad.index_fill_(-1, ctx.banned, 0.0)
            if ctx.temperature != 1.0:
                chunk_grad.div_(ctx.temperature)
            grad[index] = chunk_grad
        return grad, None, None, None, None
