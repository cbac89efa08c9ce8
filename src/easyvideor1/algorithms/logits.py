"""Log-probs of sampled tokens and entropies from logits, safe with banned (-inf) tokens.

Samplers ban tokens by setting their logits to -inf. That is harmless for `logsumexp`, but a row
whose logits are *all* -inf (e.g. a fully masked padding position) gives `-inf - -inf = NaN`, and
`p * logit` is `0 * -inf = NaN` in the entropy. Both are handled by the one implementation these
call, `models.chunked_logits` (which the trainer's log-probs use too; it works a chunk of positions
at a time, never on a full float32 copy of the logits). Use `torch.where` (never multiplication) to
mask the results, since a log-prob of a banned token is legitimately -inf.
"""

from __future__ import annotations

import torch

from ..models.chunked_logits import logprobs_and_entropy
from .masked import as_bool_mask


def _zero_outside(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return values if mask is None else torch.where(as_bool_mask(mask), values, 0.0)


def logprobs_from_logits(
    logits: torch.Tensor,
    ids: torch.Tensor,
    *,
    temperature: float = 1.0,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """`log softmax(logits / temperature)[ids]`, computed in float32 (float64 stays so), shape of `ids`.

    Positions outside `mask` (and rows whose logits are all -inf) are returned as 0 with no
    gradient; a sampled token that was banned gives -inf.
    """
    logp, _ = logprobs_and_entropy(logits, ids, temperature=temperature)
    return _zero_outside(logp, mask)


def entropy_from_logits(logits: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Per-position entropy `H = -sum_v p_v log p_v` (float32; float64 stays so), 0 outside `mask`.

    Banned tokens (p = 0, z = -inf) contribute 0. Meant for logging: call it under `torch.no_grad()`
    (or on detached logits) unless an entropy bonus is wanted.
    """
    any_ids = torch.zeros(logits.shape[:-1], dtype=torch.long, device=logits.device)  # log-probs unused
    _, entropy = logprobs_and_entropy(logits, any_ids)
    return _zero_outside(entropy, mask)
