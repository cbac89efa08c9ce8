"""Per-token log-probabilities and entropy of responses under a model (teacher forcing)."""

from __future__ import annotations

from contextlib import nullcontext

import torch

from .inputs import append_responses
from .vision import DummyVisionPass


def token_logprobs(
    logits: torch.Tensor, ids: torch.Tensor, banned: list[int] | None = None, mask: torch.Tensor | None = None
):
    """log p(ids) and entropy from ``logits [N, T, V]`` (float32), with ``banned`` token ids at -inf.

    Generation never samples banned ids (vision placeholders), so the training distribution must
    exclude them too, or sampled and recomputed log-probs disagree.
    """
    logits = logits.float()
    if banned:
        logits = logits.index_fill(-1, torch.tensor(banned, device=logits.device), float("-inf"))
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    p = logp_all.exp()
    # 0 * -inf is NaN: mask the banned entries out of the entropy sum explicitly
    entropy = -torch.where(p > 0, p * logp_all, torch.zeros_like(p)).sum(-1)
    if mask is not None:
        # padding may hold a banned id (-inf): zero it so masking never makes NaN; a non-finite value
        # on a real token stays visible (the update then skips the step and counts it)
        logp = torch.where(mask.bool(), logp, torch.zeros_like(logp))
    return logp, entropy


def response_logprobs(
    model,
    seq_inputs: dict,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    banned: list[int] | None = None,
    temperature: float = 1.0,
    dummy: DummyVisionPass | None = None,
):
    """(logp [N, T], entropy [N, T]) of each response token given its prompt."""
    device = next(model.parameters()).device  # inputs are built on the CPU; GPU runs move them here
    full = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in seq_inputs.items()}
    response_ids, response_mask = response_ids.to(device), response_mask.to(device)
    full = append_responses(full, response_ids, response_mask)
    prompt_len = seq_inputs["input_ids"].shape[1]
    ctx = dummy.expect(full) if dummy is not None else nullcontext()
    T = response_ids.shape[1]
    with ctx:
        # only the positions that predict response tokens go through the LM head: full-vocabulary
        # logits over a 4k-token video prompt would be ~1.2 GB (bf16, 151k vocab) per sequence
        out = model(**full, use_cache=False, logits_to_keep=T + 1)
    assert full["input_ids"].shape[1] == prompt_len + T
    logits = out.logits[:, :T] / temperature
    return token_logprobs(logits, response_ids, banned, response_mask)
