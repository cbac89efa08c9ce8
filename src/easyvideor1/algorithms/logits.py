"""Log-probs of sampled tokens and entropies from logits, safe with banned (-inf) tokens.

Samplers ban tokens by setting their logits to -inf. That is harmless for `logsumexp`, but a row
whose logits are *all* -inf (e.g. a fully masked padding position) gives `-inf - -inf = NaN`, and
`p * logit` is `0 * -inf = NaN` in the entropy. Both are handled here; use `torch.where` (never
multiplication) to mask the results, since a log-prob of a banned token is legitimately -inf.
"""

from __future__ import annotations

import torch

from .masked import as_bool_mask


def _dead_rows_to_zero(logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Replace rows that are entirely -inf by zeros (copying only when there is such a row)."""
    dead = torch.isneginf(logits.amax(-1))
    if bool(dead.any()):
        logits = torch.where(
            dead.unsqueeze(-1), torch.zeros((), dtype=logits.dtype, device=logits.device), logits
        )
    return logits, dead


def logprobs_from_logits(
    logits: torch.Tensor,
    ids: torch.Tensor,
    *,
    temperature: float = 1.0,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """`log softmax(logits / temperature)[ids]`, computed in float32, shape of `ids`.

    Uses `gather - logsumexp` instead of materialising the full log-softmax. Positions outside
    `mask` (and rows whose logits are all -inf) are returned as 0 with no gradient; a sampled
    token that was banned gives -inf.
    """
    if logits.shape[:-1] != ids.shape:
        raise ValueError(f"logits {tuple(logits.shape)} do not match ids {tuple(ids.shape)}")
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    logits, dead = _dead_rows_to_zero(logits)
    picked = logits.gather(-1, ids.long().unsqueeze(-1)).squeeze(-1)
    logp = picked - torch.logsumexp(logits, dim=-1)
    keep = ~dead if mask is None else as_bool_mask(mask) & ~dead
    return torch.where(keep, logp, torch.zeros((), dtype=logp.dtype, device=logp.device))


def entropy_from_logits(logits: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Per-position entropy `H = logsumexp(z) - sum_v p_v z_v` (float32), 0 outside `mask`.

    Banned tokens (p = 0, z = -inf) contribute 0. Meant for logging: call it under `torch.no_grad()`
    (or on detached logits) unless an entropy bonus is wanted.
    """
    logits, dead = _dead_rows_to_zero(logits.float())
    probs = torch.softmax(logits, dim=-1)
    zero = torch.zeros((), dtype=logits.dtype, device=logits.device)
    # Select before multiplying: 0 * -inf would be NaN, in the forward and in the backward.
    weighted = (probs * torch.where(probs > 0, logits, zero)).sum(-1)
    entropy = torch.logsumexp(logits, dim=-1) - weighted
    keep = ~dead if mask is None else as_bool_mask(mask) & ~dead
    return torch.where(keep, entropy, zero)
