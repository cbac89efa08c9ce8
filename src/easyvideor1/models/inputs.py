"""Batched model inputs: expand prompts into sequences, append responses.

A prompt batch (one row per prompt, left-padded) becomes a sequence batch (one row per response)
by repeating each prompt's rows, including its vision tensors. Qwen-VL processors give
``pixel_values*`` with one row per patch, ``t*h*w`` of them per video or image, so they are split
per item by their grids; a family whose processor gives no grids (InternVL: one ``pixel_values``
of tiles and frames) says how many rows each prompt owns (``PromptBatch.pixel_rows``, from its
adapter's ``pixel_rows``). Either way each prompt's rows are repeated with it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from .families import VISION_INPUTS as _VISION

_PER_ROW = ("input_ids", "attention_mask", "mm_token_type_ids")


@dataclass
class PromptBatch:
    """Processor outputs for B prompts plus how many videos and images each prompt holds.

    ``texts`` and ``media`` are the same prompts before the processor ran, for engines that run
    their own processor (vLLM takes prompt text and raw media, not ``pixel_values``):
    ``texts[i]`` is prompt ``i``'s chat-rendered text (generation prompt included) and
    ``media[i]`` holds ``{"video": [(frames, metadata), ...], "image": [PIL images]}`` with
    uint8 ``[T, H, W, 3]`` numpy frames already sampled and resized, and each video's metadata
    (source fps, frame indices, ``do_sample_frames=False``) so timestamps stay right.
    Both are ``None`` when a batch was built without them. ``token_prompts``, when set, replaces
    ``texts`` for those engines: each prompt as token ids with every medium one unexpanded
    placeholder (the engine's processor expands them as it would the text's), for a context that
    holds tokens the policy sampled, which must go back in as ids, never as re-tokenised text
    (a multi-turn episode, ``rollout/episode.py``). ``pixel_rows``, for families whose processor
    gives no grids (InternVL), holds each prompt's rows of every vision tensor.
    """

    inputs: dict[str, Any]
    video_counts: list[int]
    image_counts: list[int]
    texts: list[str] | None = None
    media: list[dict[str, list]] | None = None
    token_prompts: list[list[int]] | None = None
    # families without grid tensors: vision key -> rows of that tensor each prompt owns (in prompt
    # order); None: split by the Qwen-VL grids
    pixel_rows: dict[str, list[int]] | None = None

    def __len__(self) -> int:
        return len(self.video_counts)


# the tensors that hold pixels (one row per patch, tile or frame): what a step moves to the device
PIXEL_KEYS = tuple(keys[0] for keys in _VISION.values())


# set by FSDP2 sharding with CPU offload (``trainer/distributed.py``): the shards live on the CPU
# and are gathered to this device for every forward, so inputs must go there, not to the shards'
COMPUTE_DEVICE_ATTR = "evr1_compute_device"


def compute_device(model: torch.nn.Module) -> torch.device:
    """The device ``model``'s forward computes on (where its inputs go): its parameters' device,
    or the accelerator its CPU-offloaded shards are gathered to."""
    return getattr(model, COMPUTE_DEVICE_ATTR, None) or next(model.parameters()).device


def to_device(tensors: dict[str, Any], device) -> dict[str, Any]:
    """``tensors`` with every tensor on ``device`` (other values as they are).

    To a CUDA device each host tensor goes from pinned memory with ``non_blocking``: a DMA that
    overlaps the host's work, where a pageable source makes the driver stage it through a
    bounce buffer, synchronously (a tensor pinned already, e.g. by :func:`pin_pixels`, is not
    copied again on the host). On the CPU nothing is copied and nothing pinned (``pin_memory``
    needs an accelerator)."""
    device = torch.device(device)
    cuda = device.type == "cuda"
    out: dict[str, Any] = {}
    for key, value in tensors.items():
        if isinstance(value, torch.Tensor) and value.device != device:
            if cuda and value.device.type == "cpu" and not value.is_pinned():
                value = value.pin_memory()
            value = value.to(device, non_blocking=cuda)
        out[key] = value
    return out


def _pixel_keys(batch: PromptBatch) -> set[str]:
    """The keys of ``batch.inputs`` that hold pixels (a grid-less family's rows included)."""
    return set(PIXEL_KEYS) | set(batch.pixel_rows or ())


def pixels_to_device(
    batch: PromptBatch, own_media: list[dict[str, Any] | None] | None, device
) -> tuple[PromptBatch, list[dict[str, Any] | None] | None]:
    """``batch`` (a copy; the original is not touched) and ``own_media`` (an episode's tool media
    per sequence) with their pixel tensors on ``device``: a step moves each prompt's pixels once,
    and every micro-batch gathers its rows from that copy (:func:`gather_prompts` indexes tensors
    where they are). Token ids, masks and grids stay on the host, where packing and the
    micro-batch planning read them."""
    keys = _pixel_keys(batch)
    moved = to_device({k: v for k, v in batch.inputs.items() if k in keys}, device)
    batch = dataclasses.replace(batch, inputs={**batch.inputs, **moved})
    if own_media is not None:
        own_media = [
            None
            if m is None
            else {**m, **to_device({k: torch.as_tensor(m[k]) for k in keys if k in m}, device)}
            for m in own_media
        ]
    return batch, own_media


def pin_pixels(batch: PromptBatch) -> PromptBatch:
    """``batch`` with its pixel tensors in pinned host memory, where a CUDA device will take them
    (:func:`to_device` then copies them without a host copy first); as it is elsewhere."""
    if not torch.cuda.is_available():
        return batch
    keys = _pixel_keys(batch)
    pinned = {k: v.pin_memory() for k, v in batch.inputs.items() if k in keys and isinstance(v, torch.Tensor)}
    return dataclasses.replace(batch, inputs={**batch.inputs, **pinned})


def media_counts(vision: dict[str, Any] | None) -> tuple[int, int]:
    """(videos, images) whose tensors ``vision`` holds (one grid row per item), e.g. an episode's
    tool turns' media."""
    if not vision:
        return 0, 0
    videos, images = (
        0 if vision.get(_VISION[kind][1]) is None else int(vision[_VISION[kind][1]].shape[0])
        for kind in ("video", "image")
    )
    return videos, images


def merge_media(media: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    """Several sequences' own media (episodes' tool turns) as one, in order: each key's tensors
    concatenated (None when none has any)."""
    present = [m for m in media if m]
    if not present:
        return None
    keys = dict.fromkeys(k for m in present for k in m)
    return {
        k: torch.cat([torch.as_tensor(m[k]) for m in present if m.get(k) is not None])
        for k in keys
        if any(m.get(k) is not None for m in present)
    }


def _split_items(inputs: dict[str, Any], kind: str, counts: list[int]) -> list[dict[str, Any]]:
    """Per-prompt slices of one modality's tensors."""
    pix_key, grid_key, extra_key = _VISION[kind]
    if inputs.get(grid_key) is None:
        return [{} for _ in counts]
    grids = inputs[grid_key]
    rows = grids.prod(dim=1).tolist()
    out, item, row = [], 0, 0
    for c in counts:
        if c == 0:
            out.append({})  # this prompt has no item of this kind: its rows must not mention it at all
            continue
        n_rows = sum(rows[item : item + c])
        piece = {pix_key: inputs[pix_key][row : row + n_rows], grid_key: grids[item : item + c]}
        if extra_key and inputs.get(extra_key) is not None:
            piece[extra_key] = torch.as_tensor(inputs[extra_key])[item : item + c]
        out.append(piece)
        item, row = item + c, row + n_rows
    return out


def _split_rows(inputs: dict[str, Any], rows: dict[str, list[int]]) -> list[dict[str, Any]]:
    """Per-prompt slices of grid-less vision tensors, ``rows[key][i]`` rows of ``key`` for prompt ``i``."""
    n = len(next(iter(rows.values()))) if rows else 0
    out: list[dict[str, Any]] = [{} for _ in range(n)]
    for key, counts in rows.items():
        if inputs.get(key) is None:
            continue
        start = 0
        for i, c in enumerate(counts):
            if c:  # a prompt without rows must not mention the key at all
                out[i][key] = inputs[key][start : start + c]
            start += c
    return out


def _pieces(batch: PromptBatch) -> list[tuple[list[str], list[dict[str, Any]]]]:
    """Each prompt's vision tensors as (keys, per-prompt pieces) groups: one group per modality
    for Qwen-VL grids, one for a grid-less family's tensors."""
    if batch.pixel_rows is not None:
        return [(list(batch.pixel_rows), _split_rows(batch.inputs, batch.pixel_rows))]
    return [
        ([k for k in _VISION[kind] if k], _split_items(batch.inputs, kind, counts))
        for kind, counts in (("video", batch.video_counts), ("image", batch.image_counts))
    ]


def gather_prompts(batch: PromptBatch, prompt_ids: list[int]) -> dict[str, Any]:
    """Inputs with one row per entry of ``prompt_ids`` (a prompt may repeat), vision tensors included."""
    idx = torch.tensor(prompt_ids, dtype=torch.long)
    out: dict[str, Any] = {k: batch.inputs[k][idx] for k in _PER_ROW if batch.inputs.get(k) is not None}
    for _, pieces in _pieces(batch):
        for key in {k for p in pieces for k in p}:
            parts = [pieces[i][key] for i in prompt_ids if key in pieces[i]]
            if parts:
                out[key] = torch.cat(parts)
    return out


def gather_sequences(
    batch: PromptBatch, prompt_ids: list[int], extra: list[dict[str, Any] | None]
) -> dict[str, Any]:
    """:func:`gather_prompts`, each row's vision tensors followed by ``extra[row]``'s (the media of
    an episode's tool turns, after its prompt's in placeholder order; the model reads a batch's
    media row by row)."""
    if not any(extra):
        return gather_prompts(batch, prompt_ids)
    out = gather_prompts(batch, prompt_ids)
    for keys, pieces in _pieces(batch):
        for key in keys:
            parts = []
            for row, p in enumerate(prompt_ids):
                if key in pieces[p]:
                    parts.append(pieces[p][key])
                if extra[row] and extra[row].get(key) is not None:
                    parts.append(torch.as_tensor(extra[row][key]))
            if parts:
                out[key] = torch.cat(parts)
    return out


def select_prompts(batch: PromptBatch, rows: list[int]) -> PromptBatch:
    """Prompts ``rows`` of a (left-padded) batch as a batch of their own, vision tensors and raw
    prompts included, cut to the padding they need (an episode's first turn is one prompt without
    padding; a sequence-parallel rank generates for its share of the prompts)."""
    inputs = gather_prompts(batch, rows)
    start = int((inputs["attention_mask"] == 0).sum(1).min()) if rows else 0  # padding every row has
    for key in _PER_ROW:
        if inputs.get(key) is not None:
            inputs[key] = inputs[key][:, start:]

    def pick(values: list | None) -> list | None:
        return None if values is None else [values[r] for r in rows]

    return PromptBatch(
        inputs,
        [batch.video_counts[r] for r in rows],
        [batch.image_counts[r] for r in rows],
        texts=pick(batch.texts),
        media=pick(batch.media),
        token_prompts=pick(batch.token_prompts),
        pixel_rows=None if batch.pixel_rows is None else {k: pick(v) for k, v in batch.pixel_rows.items()},
    )


def expand(batch: PromptBatch, repeats: list[int]) -> dict[str, Any]:
    """Repeat prompt ``i`` ``repeats[i]`` times (rows and vision tensors), in prompt order."""
    if len(repeats) != len(batch):
        raise ValueError(f"{len(repeats)} repeat counts for {len(batch)} prompts")
    return gather_prompts(batch, [i for i, r in enumerate(repeats) for _ in range(r)])


def append_responses(
    seq_inputs: dict[str, Any],
    response_ids: torch.Tensor,
    response_mask: torch.Tensor,
    response_types: torch.Tensor | None = None,
):
    """Full sequences for a training forward: prompt rows followed by (right-padded) responses.

    ``response_mask`` marks the real tokens (attended); ``response_types``: the responses'
    ``mm_token_type_ids`` where they hold vision tokens (an episode's tool turns), else text (0)."""
    out = dict(seq_inputs)
    out["input_ids"] = torch.cat([seq_inputs["input_ids"], response_ids], dim=1)
    out["attention_mask"] = torch.cat(
        [seq_inputs["attention_mask"], response_mask.to(seq_inputs["attention_mask"].dtype)], dim=1
    )
    if seq_inputs.get("mm_token_type_ids") is not None:
        # responses are text: type 0 (transformers uses these ids for M-RoPE positions), but for
        # the vision tokens of an episode's tool turns
        dtype = seq_inputs["mm_token_type_ids"].dtype
        types = (
            torch.zeros_like(response_ids, dtype=dtype)
            if response_types is None
            else response_types.to(dtype)
        )
        out["mm_token_type_ids"] = torch.cat([seq_inputs["mm_token_type_ids"], types], dim=1)
    return out
