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

Hybrid families (Qwen3.5's gated-DeltaNet layers) pack as :func:`pack_shared` blocks of one
sequence each (:func:`needs_blocks`): their linear-attention layers take sequence boundaries only
through the ``fla`` kernels' ``cu_seqlens``, which transformers' torch fallback ignores, so in
:func:`pack`'s row the recurrent state would run on from one sequence into the next; the layout
runs them per sequence.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import torch

from .families import VISION_INPUTS, family_of_model
from .shared_prefix import ATTENTION as SHARED_ATTENTION
from .shared_prefix import Block, SharedLayout

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
    holder = getattr(model, "_shared_holder", None)
    if (
        name == SHARED_ATTENTION and holder is not None
    ):  # the shared layout's: a forward without one runs this
        name = holder.fallback
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


def needs_blocks(model) -> bool:
    """Whether packed sequences of ``model`` must run as blocks of the shared-prefix layout (one
    sequence each, :func:`pack_shared`) instead of :func:`pack`'s row: hybrid families, whose
    gated-DeltaNet layers take sequence boundaries only through the fla kernels' ``cu_seqlens``
    (transformers' torch fallback ignores them, so the recurrent state would run on from one
    sequence into the next); the layout runs those layers per sequence itself."""
    return family_of_model(model).engine.hybrid_attention


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


@dataclass
class _Alone:
    """One sequence as it would run in its own row: its prompt tokens (no padding), its response
    tokens, their token types and 3-D M-RoPE positions (None: 1-D RoPE, the text positions)."""

    prompt_len: int
    ids: torch.Tensor
    types: torch.Tensor
    positions: torch.Tensor | None


class _Sequences:
    """Reads sequences out of a prompt batch: row ``r`` of ``inputs`` (a left-padded prompt) whose
    media are ``media[r]`` (item slices of each kind), followed by a response."""

    def __init__(self, model, inputs: dict[str, Any], video_counts: list[int], image_counts: list[int]):
        self.mrope = family_of_model(model).engine.mrope
        self.inner = getattr(model, "model", model)
        self.inputs = inputs
        self.grids = {kind: inputs.get(VISION_INPUTS[kind][1]) for kind in VISION_INPUTS}
        self.seconds = inputs.get(VISION_INPUTS["video"][2])
        self.slices = {"video": _item_slices(video_counts), "image": _item_slices(image_counts)}
        self.types_in = inputs.get("mm_token_type_ids")

    def alone(
        self,
        row: int,
        response: torch.Tensor,
        types: torch.Tensor | None,
        items: dict[str, list[int]] | None = None,
    ) -> _Alone:
        """Row ``row``'s prompt followed by ``response`` (its real tokens), as in its own row.
        ``items[kind]``: which of the row's media items this sequence reads (default: all of them;
        a shared row's sequence reads its prompt's and its own)."""
        valid = self.inputs["attention_mask"][row].bool()
        prompt = self.inputs["input_ids"][row][valid]
        ids = torch.cat([prompt, response.to(prompt.dtype)])
        all_types = torch.zeros_like(ids, dtype=torch.int32 if self.types_in is None else self.types_in.dtype)
        if self.types_in is not None:
            all_types[: len(prompt)] = self.types_in[row][valid]
        if types is not None:
            all_types[len(prompt) :] = types.to(all_types.dtype)
        if not self.mrope:  # 1-D RoPE: the text positions are all there is
            return _Alone(len(prompt), ids, all_types, None)
        media: dict[str, Any] = {}
        for kind, (_, grid_key, extra_key) in VISION_INPUTS.items():
            sl = self.slices[kind][row]
            picked = list(range(sl.start, sl.stop))
            if items is not None:
                picked = [sl.start + i for i in items[kind]]
            if picked:
                media[grid_key] = self.grids[kind][picked]
                if extra_key and kind == "video" and self.seconds is not None:
                    media[extra_key] = torch.as_tensor(self.seconds)[picked]
        if media:  # the model's own 3-D positions for this sequence alone
            pos, _ = self.inner.get_rope_index(ids[None], mm_token_type_ids=all_types[None], **media)
            pos = pos[:, 0].to(torch.long)
        else:  # text only: get_rope_index's positions are 0..L-1 on all three axes
            pos = torch.arange(len(ids)).expand(3, -1)
        return _Alone(len(prompt), ids, all_types, pos)


def _response(response_ids: torch.Tensor, response_mask: torch.Tensor, s: int) -> torch.Tensor:
    n_resp = int(response_mask[s].sum())
    if not bool(response_mask[s, :n_resp].bool().all()):
        raise ValueError(f"sequence {s}: the response mask is not a prefix of ones (right padding)")
    return response_ids[s, :n_resp]


def _row_inputs(model, seqs: _Sequences, ids, types, positions) -> dict[str, Any]:
    """The packed row's model inputs: ids, positions (M-RoPE: the text row first), token types
    where the processor gave them, and the batch's vision tensors as they are."""
    inputs: dict[str, Any] = {
        "input_ids": torch.cat(ids)[None],
        "position_ids": torch.cat(positions, dim=1)[:, None, :]
        if seqs.mrope
        else torch.cat(positions, dim=1),
    }
    if seqs.types_in is not None:
        inputs["mm_token_type_ids"] = torch.cat(types)[None]
    for key in _VISION_KEYS:
        if seqs.inputs.get(key) is not None:
            inputs[key] = seqs.inputs[key]
    return inputs


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
    if needs_blocks(model):
        raise ValueError(
            f"{family_of_model(model).model_type} packs as shared-prefix blocks (pack_shared), not pack"
        )
    n_seq = response_ids.shape[0]
    if len(video_counts) != n_seq or len(image_counts) != n_seq:
        raise ValueError(f"media counts for {len(video_counts)}/{len(image_counts)} of {n_seq} sequences")
    seqs = _Sequences(model, seq_inputs, video_counts, image_counts)
    ids_parts, type_parts, pos_parts, keep, rows, cols, lengths = [], [], [], [], [], [], []
    offset = 0
    for s in range(n_seq):
        response = _response(response_ids, response_mask, s)
        n_resp = len(response)
        alone = seqs.alone(s, response, None if response_types is None else response_types[s, :n_resp])
        length = len(alone.ids)
        # a fourth row (M-RoPE) or the only one: the text positions, restarting at every sequence
        text = torch.arange(length)[None]
        pos_parts.append(text if alone.positions is None else torch.cat([text, alone.positions], dim=0))
        ids_parts.append(alone.ids)
        type_parts.append(alone.types)
        # the prediction of response token j comes from the position before it
        start = offset + alone.prompt_len - 1
        keep.append(torch.arange(start, start + n_resp))
        rows.append(torch.full((n_resp,), s, dtype=torch.long))
        cols.append(torch.arange(n_resp))
        lengths.append(length)
        offset += length
    inputs = _row_inputs(model, seqs, ids_parts, type_parts, pos_parts)
    inputs.update(varlen_inputs(model, lengths))
    return Packed(inputs, torch.cat(keep), torch.cat(rows), torch.cat(cols), lengths)


@dataclass
class SharedPacked(Packed):
    """:class:`Packed` for a shared-prefix row: ``layout`` says where each prompt and response
    lies (``models/shared_prefix.py``); ``lengths`` are the blocks'."""

    layout: SharedLayout | None = None


def pack_shared(
    model,
    inputs: dict[str, Any],
    blocks: list[int],
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    media_counts: tuple[list[int], list[int]],
    own_counts: tuple[list[int], list[int]] | None = None,
    response_types: torch.Tensor | None = None,
) -> SharedPacked:
    """One row holding each prompt of ``inputs`` once, followed by the responses that answer it.

    Sequence ``s`` answers row ``blocks[s]`` of ``inputs``. ``media_counts``: (videos, images) of each row of ``inputs``, its prompt's media
    followed by its sequences' own (an episode's tool turns: ``own_counts[s]`` of them, in
    sequence order, as ``models.inputs.gather_sequences`` lays them out). Each response's positions
    are those of its own row (the model's ``get_rope_index`` over its prompt and itself, its media
    the prompt's and its own); the row's text positions run on without restarts (the layout, not
    the positions, says where sequences start).
    """
    n_seq = response_ids.shape[0]
    if len(blocks) != n_seq:
        raise ValueError(f"{len(blocks)} blocks for {n_seq} sequences")
    seqs = _Sequences(model, inputs, *media_counts)
    own_v, own_i = own_counts if own_counts is not None else ([0] * n_seq, [0] * n_seq)
    ids_parts, type_parts, pos_parts, keep, rows, cols = [], [], [], [], [], []
    shared_blocks: list[Block] = []
    offset = 0
    for row in sorted(set(blocks)):
        members = [s for s in range(n_seq) if blocks[s] == row]
        prompt_items = {
            "video": media_counts[0][row] - sum(own_v[s] for s in members),
            "image": media_counts[1][row] - sum(own_i[s] for s in members),
        }
        taken = dict(prompt_items)  # media items of the row laid out so far: the prompt's first
        start, prompt_len, responses = offset, 0, []
        for k, s in enumerate(members):
            response = _response(response_ids, response_mask, s)
            n_resp = len(response)
            items = {}
            for kind, own in (("video", own_v[s]), ("image", own_i[s])):
                items[kind] = list(range(prompt_items[kind])) + list(range(taken[kind], taken[kind] + own))
                taken[kind] += own
            alone = seqs.alone(
                row, response, None if response_types is None else response_types[s, :n_resp], items
            )
            prompt_len = alone.prompt_len
            cut = 0 if k == 0 else prompt_len  # the prompt once, with the first response
            ids_parts.append(alone.ids[cut:])
            type_parts.append(alone.types[cut:])
            if alone.positions is not None:
                pos_parts.append(alone.positions[:, cut:])
            else:  # 1-D RoPE: the response continues from the prompt's end
                pos_parts.append(torch.arange(cut, len(alone.ids))[None])
            before = offset + (prompt_len if k == 0 else 0)  # where this response starts in the row
            # response token 0 is predicted by the prompt's last position, token j by the one before
            keep.append(
                torch.cat([torch.tensor([start + prompt_len - 1]), before + torch.arange(n_resp - 1)])[
                    :n_resp
                ]
            )
            rows.append(torch.full((n_resp,), s, dtype=torch.long))
            cols.append(torch.arange(n_resp))
            responses.append(n_resp)
            offset += len(alone.ids) - cut
        shared_blocks.append(Block(start, prompt_len, tuple(responses)))
    if seqs.mrope:  # the text row first: one sequence to transformers (the layout says the rest)
        pos_parts = [torch.cat([torch.zeros_like(p[:1]), p], dim=0) for p in pos_parts]
    packed = _row_inputs(model, seqs, ids_parts, type_parts, pos_parts)
    if seqs.mrope:
        packed["position_ids"][0] = torch.arange(offset)
    keep_t = torch.cat(keep) if keep else torch.zeros(0, dtype=torch.long)
    lengths = [b.stop - b.start for b in shared_blocks]
    return SharedPacked(
        packed, keep_t, torch.cat(rows), torch.cat(cols), lengths, SharedLayout(tuple(shared_blocks))
    )
