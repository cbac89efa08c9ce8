"""Per-token log-probabilities and entropy of responses under a model (teacher forcing)."""

from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.nn.functional as F

from .chunked_logits import logprobs_and_entropy
from .inputs import append_responses, compute_device
from .packing import pack
from .sequence_parallel import gather_tokens, group_of, shard_bounds
from .vision import DummyVisionPass
from .vision_cache import VisionFeatureCache


def token_logprobs(
    logits: torch.Tensor,
    ids: torch.Tensor,
    banned: list[int] | None = None,
    mask: torch.Tensor | None = None,
    temperature: float = 1.0,
):
    """(log p(ids), entropy) from ``logits [N, T, V]`` divided by ``temperature``, in float32, with
    ``banned`` token ids at -inf (``chunked_logits``: no full float32 copy of the logits).

    Generation never samples banned ids (vision placeholders), so the training distribution must
    exclude them too, or sampled and recomputed log-probs disagree. The entropy is a metric: it
    comes back detached.
    """
    logp, entropy = logprobs_and_entropy(logits, ids, banned=banned, temperature=temperature)
    if mask is not None:
        # padding may hold a banned id (-inf): zero it so masking never makes NaN; a non-finite value
        # on a real token stays visible (the update then skips the step and counts it)
        logp = torch.where(mask.bool(), logp, 0.0)
    return logp, entropy.detach()


def response_logprobs(
    model,
    seq_inputs: dict,
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    banned: list[int] | None = None,
    temperature: float = 1.0,
    dummy: DummyVisionPass | None = None,
    *,
    padding_free: bool = False,
    media_counts: tuple[list[int], list[int]] | None = None,
    vision: VisionFeatureCache | None = None,
    prompt_ids: list[int] | None = None,
    response_types: torch.Tensor | None = None,
    sequence_ids: list[int] | None = None,
):
    """(logp [N, T], entropy [N, T]) of each response token given its prompt.

    ``response_mask`` marks the responses' real tokens (attended, and given a log-prob): for an
    episode, its tool turns too (``response_types`` types their vision tokens); the caller's loss
    mask keeps the policy's own.

    ``padding_free``: the sequences run as one packed row (``models.packing``); it needs
    ``media_counts`` (videos, images of each sequence). ``vision``: a started feature cache serves
    the vision features of ``prompt_ids`` (each sequence's prompt index in the cache's batch) and,
    with ``sequence_ids``, of each sequence's own media (an episode's tool turns).
    Both give the padded, re-encoding forward's values (within float tolerance).
    """
    device = compute_device(model)  # inputs are built on the CPU; GPU runs move them here
    serve = vision is not None and vision.active
    if serve and prompt_ids is None:
        raise ValueError("a vision feature cache needs the prompt index of every sequence")
    with vision.serving(prompt_ids, sequence_ids) if serve else nullcontext():
        if padding_free:
            if media_counts is None:
                raise ValueError("padding-free log-probs need each sequence's media counts")
            return _packed_logprobs(
                model,
                seq_inputs,
                response_ids,
                response_mask,
                banned,
                temperature,
                dummy,
                media_counts,
                serve,
                response_types,
            )
        full = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in seq_inputs.items()}
        response_ids, response_mask = response_ids.to(device), response_mask.to(device)
        full = append_responses(
            full, response_ids, response_mask, None if response_types is None else response_types.to(device)
        )
        prompt_len = seq_inputs["input_ids"].shape[1]
        # a served forward calls no tower, so no dummy either (the frozen tower needs no gradient)
        ctx = dummy.expect(full) if dummy is not None and not serve else nullcontext()
        T = response_ids.shape[1]
        with ctx:
            # only the positions that predict response tokens go through the LM head: full-vocabulary
            # logits over a 4k-token video prompt would be ~1.2 GB (bf16, 151k vocab) per sequence
            out = model(**full, use_cache=False, logits_to_keep=T + 1)
        assert full["input_ids"].shape[1] == prompt_len + T
        sp = group_of(model)
        if sp is not None:  # sequence parallelism: this rank's share of the T + 1 kept positions
            return _gathered_logprobs(
                out.logits, response_ids, response_mask, banned, temperature, sp, T + 1, T
            )
        return token_logprobs(out.logits[:, :T], response_ids, banned, response_mask, temperature)


def _gathered_logprobs(logits, ids, mask, banned, temperature, sp, kept: int, width: int):
    """Log-probs and entropy of this rank's share of the ``kept`` positions (its LM head computed
    only those logits), gathered over the sequence-parallel group: ``[B, width]`` on every rank."""
    start, stop = shard_bounds(kept, sp)
    pad = stop - ids.shape[1]
    if pad > 0:
        ids, mask = F.pad(ids, (0, pad)), (None if mask is None else F.pad(mask, (0, pad)))
    lp, ent = token_logprobs(
        logits, ids[:, start:stop], banned, None if mask is None else mask[:, start:stop], temperature
    )
    return gather_tokens(lp, sp, kept)[:, :width], gather_tokens(ent, sp, kept)[:, :width]


def _packed_logprobs(
    model, seq_inputs, response_ids, response_mask, banned, temperature, dummy, counts, serve, response_types
):
    device = compute_device(model)
    packed = pack(model, seq_inputs, response_ids, response_mask, counts[0], counts[1], response_types)
    inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in packed.inputs.items()}
    ctx = dummy.expect(inputs) if dummy is not None and not serve else nullcontext()
    with ctx:
        # a tensor logits_to_keep selects exactly the positions that predict response tokens
        out = model(**inputs, use_cache=False, logits_to_keep=packed.keep.to(device))
    ids = response_ids.to(device)[packed.rows.to(device), packed.cols.to(device)]
    sp = group_of(model)
    if sp is not None:  # sequence parallelism: this rank's share of the kept positions
        kept = ids.shape[0]
        lp, ent = _gathered_logprobs(out.logits, ids[None], None, banned, temperature, sp, kept, kept)
    else:
        lp, ent = token_logprobs(out.logits, ids[None], banned, temperature=temperature)
    index = (packed.rows.to(device), packed.cols.to(device))
    logp = lp.new_zeros(response_ids.shape).index_put(index, lp[0])
    entropy = ent.new_zeros(response_ids.shape).index_put(index, ent[0])
    return logp, entropy
