"""Padding-free packing: the sequences of a micro-batch as one row, exact to the padded forward.

A padded micro-batch computes ``rows x longest`` tokens; a packed one computes only the real
tokens. Each sequence keeps what it would see alone:

- its 3-D M-RoPE positions, computed by the model's own ``get_rope_index`` for that sequence alone
  (its valid prompt tokens, its media grids, its response), so text and vision positions are the
  padded path's;
- its attention boundaries: the packed ``position_ids`` carry a fourth row, the per-sequence text
  position (0, 1, ... restarting at every sequence), which transformers' Qwen-VL text models read
  as the packed-sequence layout when no ``attention_mask`` is given: sdpa and eager get a
  block-diagonal causal mask from it, flash-attention the varlen boundaries (``cu_seqlens``, from
  ``prepare_fa_kwargs_from_position_ids``: every position equal to the row's minimum, 0, starts a
  sequence).

With ``model.attn_implementation=flash_attention_2`` the row also carries those boundaries
explicitly (:func:`varlen_inputs`: ``cu_seq_lens_q/k``, ``max_length_q/k``), so every layer's
flash call takes them as given instead of re-deriving them from the positions (a check and a
``nonzero`` per layer, each a device sync). transformers keeps these four keys out of the vision
encoders (which have their own ``cu_seqlens``) from the version that lists them in
``utils.generic._FLASH_VARLEN_KWARGS``; with an older one the positions alone say the same.

Families with 1-D RoPE (InternVL's Qwen3 text model) need neither: a sequence's positions are its
text positions, ``position_ids`` ``[1, L]`` restart at 0 at every sequence, and transformers reads
the same restarts as the packed layout.

Hybrid families (Qwen3.5's gated-DeltaNet layers) are refused: their linear-attention layers take
sequence boundaries only through the ``fla`` kernels' ``cu_seqlens``; transformers' torch fallback
ignores them, so the recurrent state would run on from one sequence into the next, silently wrong.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import ConfigError
from .families import VISION_INPUTS, family_of_model

# keys copied as they are: the vision tensors of the micro-batch, in sequence order
_VISION_KEYS = tuple(k for keys in VISION_INPUTS.values() for k in keys if k)


@dataclass
class Packed:
    """One packed row and where its predictions go.

    Attributes:
        inputs: model inputs (``input_ids`` ``[1, L]``, ``position_ids`` ``[4, 1, L]`` (M-RoPE) or
            ``[1, L]`` (1-D RoPE), the
            sequences' vision tensors, ``mm_token_type_ids`` where the processor gave them).
        keep: ``[K]`` positions whose logits predict a response token (``logits_to_keep``).
        rows, cols: ``[K]`` the sequence and response position each kept prediction belongs to.
        lengths: tokens of each sequence in the row (prompt without padding + response).
    """

    inputs: dict[str, Any]
    keep: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor
    lengths: list[int]


def cu_seqlens(lengths: list[int]) -> torch.Tensor:
    """``[N + 1]`` int32: where each of the packed sequences starts in the row, then its length."""
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)


def flash_text_attention(model) -> bool:
    """Whether ``model``'s language model runs flash-attention (its text config's implementation:
    sequence parallelism replaces it with its own, which takes the layout from the positions)."""
    from transformers.utils.generic import is_flash_attention_requested

    config = getattr(model, "config", None)
    text = getattr(config, "text_config", None) or config
    name = getattr(text, "_attn_implementation", None)
    return bool(name) and is_flash_attention_requested(requested_attention_implementation=name)


def _encoders_ignore_varlen() -> bool:
    """Whether this transformers keeps the text's varlen keys out of the vision encoders."""
    from transformers.utils import generic

    return "cu_seq_lens_q" in getattr(generic, "_FLASH_VARLEN_KWARGS", ())


def varlen_inputs(model, lengths: list[int]) -> dict[str, Any]:
    """flash-attention's varlen inputs for a row packing sequences of ``lengths`` tokens, or ``{}``
    when ``model``'s text attention is not flash (sdpa/eager read the positions) or this
    transformers would hand them to the vision tower too. ``max_length_*`` are ints: the kernel
    takes them as host numbers, so no device sync per layer."""
    if not (flash_text_attention(model) and _encoders_ignore_varlen()):
        return {}
    cu = cu_seqlens(lengths)
    longest = max(lengths)
    return {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": longest, "max_length_k": longest}


def check_packable(model) -> None:
    """Raise a clear error when ``trainer.padding_free`` cannot be exact for ``model``'s family."""
    family = family_of_model(model)
    if family.engine.hybrid_attention:
        raise ConfigError(
            f"trainer.padding_free is not supported for {family.model_type}: its linear-attention "
            "(gated DeltaNet) layers take sequence boundaries only through the fla kernels' "
            "cu_seqlens, which transformers' torch fallback ignores, so packed sequences would leak "
            "state into each other; set trainer.padding_free=false"
        )


def sequence_lengths(seq_inputs: dict[str, Any], response_mask: torch.Tensor) -> list[int]:
    """Real tokens of each sequence: its prompt without padding plus its response."""
    prompt = seq_inputs["attention_mask"].sum(1)
    return (prompt + response_mask.sum(1).to(prompt.dtype)).tolist()


def _item_slices(counts: list[int]) -> list[slice]:
    out, start = [], 0
    for c in counts:
        out.append(slice(start, start + c))
        start += c
    return out


def pack(
    model,
    seq_inputs: dict[str, Any],
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    video_counts: list[int],
    image_counts: list[int],
    response_types: torch.Tensor | None = None,
) -> Packed:
    """Pack ``N`` sequences (left-padded prompts + right-padded responses) into one row.

    ``video_counts[s]`` / ``image_counts[s]``: media items of sequence ``s`` (an episode's: its
    prompt's and its tool turns'), whose tensors lie in ``seq_inputs`` in sequence order (as
    ``models.inputs.gather_prompts`` / ``gather_sequences`` build them). ``response_types``: the
    responses' ``mm_token_type_ids`` where they hold vision tokens (an episode's tool turns).
    """
    check_packable(model)
    mrope = family_of_model(model).engine.mrope
    inner = getattr(model, "model", model)
    n_seq = response_ids.shape[0]
    if len(video_counts) != n_seq or len(image_counts) != n_seq:
        raise ValueError(f"media counts for {len(video_counts)}/{len(image_counts)} of {n_seq} sequences")
    grids = {kind: seq_inputs.get(VISION_INPUTS[kind][1]) for kind in VISION_INPUTS}
    seconds = seq_inputs.get(VISION_INPUTS["video"][2])
    slices = {"video": _item_slices(video_counts), "image": _item_slices(image_counts)}
    types_in = seq_inputs.get("mm_token_type_ids")
    ids_parts, type_parts, pos_parts, keep, rows, cols, lengths = [], [], [], [], [], [], []
    offset = 0
    for s in range(n_seq):
        valid = seq_inputs["attention_mask"][s].bool()
        n_resp = int(response_mask[s].sum())
        if not bool(response_mask[s, :n_resp].bool().all()):
            raise ValueError(f"sequence {s}: the response mask is not a prefix of ones (right padding)")
        prompt = seq_inputs["input_ids"][s][valid]
        ids = torch.cat([prompt, response_ids[s, :n_resp].to(prompt.dtype)])
        types = torch.zeros_like(ids, dtype=torch.int32 if types_in is None else types_in.dtype)
        if types_in is not None:
            types[: len(prompt)] = types_in[s][valid]
        if response_types is not None:
            types[len(prompt) :] = response_types[s, :n_resp].to(types.dtype)
        media: dict[str, Any] = {}
        for kind, (_, grid_key, extra_key) in VISION_INPUTS.items() if mrope else ():
            sl = slices[kind][s]
            if sl.stop > sl.start:
                media[grid_key] = grids[kind][sl]
                if extra_key and kind == "video" and seconds is not None:
                    media[extra_key] = torch.as_tensor(seconds)[sl]
        if not mrope:  # 1-D RoPE: the text positions are all there is
            pos = None
        elif media:  # the model's own 3-D positions for this sequence alone
            pos, _ = inner.get_rope_index(ids[None], mm_token_type_ids=types[None], **media)
            pos = pos[:, 0].to(torch.long)
        else:  # text only: get_rope_index's positions are 0..L-1 on all three axes
            pos = torch.arange(len(ids)).expand(3, -1)
        length = len(ids)
        text = torch.arange(length, device=ids.device if pos is None else pos.device)
        pos_parts.append(text[None] if pos is None else torch.cat([text[None], pos.to(text.device)], dim=0))
        ids_parts.append(ids)
        type_parts.append(types)
        # the prediction of response token j comes from the position before it
        start = offset + len(prompt) - 1
        keep.append(torch.arange(start, start + n_resp))
        rows.append(torch.full((n_resp,), s, dtype=torch.long))
        cols.append(torch.arange(n_resp))
        lengths.append(length)
        offset += length
    positions = torch.cat(pos_parts, dim=1)
    inputs: dict[str, Any] = {
        "input_ids": torch.cat(ids_parts)[None],
        "position_ids": positions[:, None, :] if mrope else positions,
    }
    if types_in is not None:
        inputs["mm_token_type_ids"] = torch.cat(type_parts)[None]
    for key in _VISION_KEYS:
        if seq_inputs.get(key) is not None:
            inputs[key] = seq_inputs[key]
    inputs.update(varlen_inputs(model, lengths))
    return Packed(inputs, torch.cat(keep), torch.cat(rows), torch.cat(cols), lengths)
