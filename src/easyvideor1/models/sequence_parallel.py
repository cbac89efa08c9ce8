"""Ulysses sequence parallelism for the language model of a vision-language policy.

``distributed.sequence_parallel_size: k`` puts every k consecutive ranks in a *sequence-parallel
group* that holds the same samples. The vision tower runs as usual and its features are merged
into the input embeddings; then, inside the language model, each rank keeps one contiguous k-th
of the sequence (padded to a multiple of k, the padding masked out of attention). Every layer
works on its shard, except attention: DeepSpeed-Ulysses style, an all-to-all turns the sequence
shards of q, k and v into head shards (each rank then sees the whole sequence for H/k heads),
attention runs, and a second all-to-all turns the result back into sequence shards. M-RoPE
positions are sliced with the sequence, so rotary embeddings are applied per shard before the
exchange; Qwen3-VL's DeepStack features are sliced to the visual tokens of the shard. The final
hidden states are gathered, so the LM head, log-probs, entropy and loss see the whole sequence
(identically on every rank of the group).

The LM head, the log-probs, the entropy and the loss run on shards too: each rank's head reads
its own contiguous share of the positions whose logits are kept (the response tokens), computes
their log-probs and entropy (``models/logprobs.py``), and those per-token values (not the logits)
are gathered, so every rank of the group computes the same loss.

Gradients: the log-prob gather's backward keeps each rank's own slice, the hidden-state gather's
sums over the group first (each rank's head read other ranks' positions), the all-to-alls'
backward is the reverse exchange; so each rank's parameter gradients are the contributions of its
own tokens and the group's sum is the full gradient. FSDP averages over every rank, so the trainer scales the loss
by k (``GlobalBatchStats.dp_size``), which makes an SP step equal the single-process step.

The vision tower's work is split too: each rank encodes a contiguous share of the frames (the
tower attends within a frame, so the features are the same) and the features are gathered before
they are merged, so no rank encodes the whole video (:func:`frame_split`).

Qwen3.5's gated-DeltaNet layers are a recurrence along the sequence, so they cannot run on a
shard of it; they run head-parallel instead (:func:`_sharded_deltanet`): each rank projects its
shard, an all-to-all gives it the whole sequence of its k-th of the heads (their channels of the
causal convolution, their gates), the convolution and the recurrence run on those heads, and a
second all-to-all returns the output to sequence shards before the output projection.

The group and the differentiable collectives these exchanges use are ``sequence_parallel_comms.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ..errors import ConfigError
from . import layers
from .sequence_parallel_comms import AllToAll, Gather, GatherShared, SPGroup, gather_tokens, shard_bounds
from .shared_prefix import DeltaNetHeads, blockwise_deltanet, deltanet_core, layout_of, shared_attention

__all__ = ["SPGroup", "check", "enable", "frame_split", "gather_tokens", "group_of", "shard_bounds"]

ATTENTION = "ulysses_sdpa"  # the attention implementation name registered with transformers


class _Holder:
    """The layout of the model's latest sharded forward, read by its attention and DeltaNet
    layers. It stays until the next forward (not cleared when the forward returns): gradient
    checkpointing recomputes the layers in the backward, with the same layout."""

    layout: _Layout | None = None


@dataclass
class _Layout:
    group: SPGroup
    key_valid: torch.Tensor  # [B, T] bool, the whole (padded) sequence: which keys are real
    segments: torch.Tensor | None  # [B, T] packed sequences' ids (attention stays within one)
    # per row, the stretches [start, stop) attended causally on their own (:func:`causal_spans`);
    # None: a layout only the dense mask expresses (:func:`_mask`)
    spans: list[list[tuple[int, int]]] | None = None
    start: int = 0  # this rank's shard of the (padded) sequence
    stop: int = 0


def group_of(model) -> SPGroup | None:
    """The sequence-parallel group ``model`` was split over (:func:`enable`), or None."""
    return getattr(model, "_sp_group", None)


# ------------------------------------------------------------------------------------ attention
def ulysses_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """The registered attention function: Ulysses inside a sharded forward, plain SDPA otherwise
    (generation with the same model, a forward outside :func:`sharded`)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    holder = getattr(module, "_sp_holder", None)
    layout = holder.layout if holder is not None else None
    if layout is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    sp = layout.group
    heads, kv_heads = query.shape[1], key.shape[1]
    if kv_heads % sp.size:  # fewer key/value heads than ranks: give every query head its own copy
        key = key.repeat_interleave(heads // kv_heads, dim=1)
        value = value.repeat_interleave(heads // kv_heads, dim=1)
    # [B, H, S/k, D] -> [B, H/k, S, D]: this rank's heads over the whole sequence
    q, k, v = (AllToAll.apply(t, sp, 1, 2) for t in (query, key, value))
    if k.shape[1] != q.shape[1]:  # grouped-query attention: query head h reads key head h // groups
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
        v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
    p = dropout if module.training else 0.0
    shared = layout_of(module)
    if shared is not None:  # each prompt once, its responses after it (whole sequence, my heads)
        out = shared_attention(q, k, v, shared, p, scaling)
    elif layout.spans is not None:  # the causal kernel on each sequence's stretch: no mask in memory
        out = span_attention(q, k, v, layout.spans, p, scaling)
    else:
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=_mask(layout, q.shape[2], q.device), dropout_p=p, scale=scaling
        )
    out = AllToAll.apply(out, sp, 2, 1)  # back to [B, H, S/k, D]
    return out.transpose(1, 2).contiguous(), None


def causal_spans(
    key_valid: torch.Tensor, segments: torch.Tensor | None
) -> list[list[tuple[int, int]]] | None:
    """Per row of a ``[B, S]`` layout, the stretches ``[start, stop)`` inside which attention is
    plain causal attention: one per sequence (a packed row holds several), over its real tokens.
    The last stretch of a row runs on over the padding after it: no real query reaches those
    keys, and those queries' outputs are never read, so the kernel may as well include them (a
    right-padded row is then one stretch, the whole row). Positions outside every stretch are
    padding. None when some sequence's real tokens are not contiguous: only the dense mask
    expresses that."""
    valid = key_valid.cpu()
    seg = None if segments is None else segments.cpu()
    length = valid.shape[1]
    rows = []
    for b in range(valid.shape[0]):
        pos = valid[b].nonzero().flatten()
        if pos.numel() == 0:  # all padding: nothing to attend
            rows.append([])
            continue
        ids = torch.zeros_like(pos) if seg is None else seg[b, pos]
        new_sequence = ids[1:] != ids[:-1]
        gap = pos[1:] != pos[:-1] + 1
        if bool((gap & ~new_sequence).any()):  # a hole inside one sequence
            return None
        starts = torch.cat([pos[:1], pos[1:][new_sequence]]).tolist()
        stops = torch.cat([pos[:-1][new_sequence] + 1, pos[-1:] + 1]).tolist()
        if torch.unique(ids).numel() != len(starts):  # a sequence resumes after another one
            return None
        stops[-1] = length
        rows.append(list(zip(starts, stops, strict=True)))
    return rows


def span_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    spans: list[list[tuple[int, int]]],
    dropout: float = 0.0,
    scale: float | None = None,
) -> torch.Tensor:
    """``[B, H, S, D]`` attention with the causal kernel on each stretch of :func:`causal_spans`
    alone (zeros elsewhere: padding, never read). Memory stays linear in S (no S x S mask); rows
    laid out alike share each call, a row of one stretch over everything is one call, no copy."""
    length = q.shape[2]

    def causal(rows: slice, start: int, stop: int) -> torch.Tensor:
        part = (t[rows, :, start:stop] for t in (q, k, v))
        return F.scaled_dot_product_attention(*part, dropout_p=dropout, scale=scale, is_causal=True)

    if all(s == spans[0] for s in spans):
        layouts = [(slice(None), spans[0])]
    else:
        layouts = [(slice(b, b + 1), s) for b, s in enumerate(spans)]
    outs = []
    for rows, stretches in layouts:
        pieces, at = [], 0
        n = q[rows].shape[0]
        for start, stop in stretches:
            if start > at:
                pieces.append(q.new_zeros(n, q.shape[1], start - at, v.shape[3]))
            pieces.append(causal(rows, start, stop))
            at = stop
        if at < length:
            pieces.append(q.new_zeros(n, q.shape[1], length - at, v.shape[3]))
        outs.append(pieces[0] if len(pieces) == 1 else torch.cat(pieces, dim=2))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=0)


def _mask(layout: _Layout, length: int, device) -> torch.Tensor:
    """[B, 1, S, S] bool, for a layout :func:`causal_spans` cannot express: causal, real keys
    only, within one packed sequence; a query with no key left (padding) attends to itself, so no
    row is empty (its output is never read)."""
    causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    mask = causal[None] & layout.key_valid.to(device)[:, None, :]
    if layout.segments is not None:
        seg = layout.segments.to(device)
        mask = mask & (seg[:, :, None] == seg[:, None, :])
    mask = mask | torch.eye(length, dtype=torch.bool, device=device)[None]
    return mask[:, None]


def register() -> None:
    """Make :data:`ATTENTION` a transformers attention implementation (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, ulysses_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)


# ------------------------------------------------------------------------- the sharded forward
def check(model, size: int) -> None:
    """Refuse, naming the key, a model whose language model cannot be split ``size`` ways."""
    from .families import family_of_model

    key = f"distributed.sequence_parallel_size={size}"
    family = family_of_model(model)  # a model of a family we know
    if not family.engine.mrope:
        # the split follows Qwen-VL's layout: M-RoPE positions and a tower split by frame grids
        raise ConfigError(
            f"{key} is not supported for {family.model_type}: sequence parallelism splits Qwen-VL "
            "M-RoPE positions and grid-split vision towers; use distributed.sequence_parallel_size=1"
        )
    language_model = layers.language_model(model)
    deltanet = any(layers.is_deltanet(m) for m in language_model.modules())
    check_heads(language_model.config, size, deltanet)


def check_heads(text_config, size: int, deltanet: bool) -> None:
    """Refuse, naming the key, a language model (its ``text_config``) whose heads cannot be split
    ``size`` ways: its attention heads and, with gated-DeltaNet layers, their key and value heads."""
    key = f"distributed.sequence_parallel_size={size}"
    heads = {"attention heads": text_config.num_attention_heads}
    if deltanet:
        heads["linear-attention key heads"] = text_config.linear_num_key_heads
        heads["linear-attention value heads"] = text_config.linear_num_value_heads
    for what, n in heads.items():
        if n % size:
            raise ConfigError(f"{key} must divide the model's {what} ({n})")


def _vision_tower(model):
    for name, module in model.named_modules():
        if name.endswith("visual") and hasattr(module, "blocks"):
            return module
    raise ValueError(f"{type(model).__name__} has no vision tower to split by frames")


def frame_split(grid_thw: torch.Tensor, size: int) -> list[list[tuple[int, int, int, int]]]:
    """Each rank's share of a tower call's frames: ``(item, first frame, frames, patches per
    frame)`` runs, contiguous in patch order and balanced by patch count. The tower attends within
    one (temporal patch of a) frame, so encoding the shares apart gives the same features. An
    empty list when there are fewer frames than ranks (every rank then encodes everything)."""
    units = [(i, t, int(h * w)) for i, (n, h, w) in enumerate(grid_thw.tolist()) for t in range(int(n))]
    if len(units) < size:
        return []
    total = sum(u[2] for u in units)
    shares: list[list[tuple[int, int, int]]] = [[] for _ in range(size)]
    done, rank = 0, 0
    for k, unit in enumerate(units):
        left = len(units) - k  # every later rank keeps at least one frame
        if (
            rank < size - 1
            and shares[rank]
            and (done >= total * (rank + 1) / size or left <= size - 1 - rank)
        ):
            rank += 1
        shares[rank].append(unit)
        done += unit[2]
    runs = []
    for share in shares:
        mine: list[tuple[int, int, int, int]] = []
        for item, t, patches in share:
            if mine and mine[-1][0] == item and mine[-1][1] + mine[-1][2] == t:
                mine[-1] = (item, mine[-1][1], mine[-1][2] + 1, patches)
            else:
                mine.append((item, t, 1, patches))
        runs.append(mine)
    return runs


def _split_tower(tower, sp: SPGroup) -> None:
    """Each rank of the group encodes its share of the frames (:func:`frame_split`); the merged
    features (and Qwen3-VL's DeepStack features) are gathered, in frame order."""
    original = tower.forward
    merge = tower.spatial_merge_size**2

    def forward(hidden_states, grid_thw, **kwargs):
        runs = frame_split(grid_thw, sp.size)
        if not runs:
            return original(hidden_states, grid_thw, **kwargs)
        starts = [0]  # first patch of each item
        for n, h, w in grid_thw.tolist():
            starts.append(starts[-1] + int(n * h * w))
        mine = runs[sp.rank]
        spans = [(starts[i] + t * p, k * p) for i, t, k, p in mine]
        if len(spans) == 1 or all(a + n == b for (a, n), (b, _) in zip(spans, spans[1:], strict=False)):
            # one stretch of patches: a view, not a copy of this rank's pixels
            pixels = hidden_states.narrow(0, spans[0][0], sum(n for _, n in spans))
        else:
            pixels = torch.cat([hidden_states.narrow(0, a, n) for a, n in spans])
        grid = torch.tensor([[k, *grid_thw[i, 1:].tolist()] for i, _, k, _ in mine], dtype=grid_thw.dtype)
        out = original(pixels, grid.to(grid_thw.device), **kwargs)
        sizes = [sum(k * p for _, _, k, p in run) // merge for run in runs]  # features per rank
        out.pooler_output = GatherShared.apply(out.pooler_output, sp, sizes)
        if getattr(out, "deepstack_features", None) is not None:
            out.deepstack_features = [GatherShared.apply(f, sp, sizes) for f in out.deepstack_features]
        out.last_hidden_state = None  # this rank's frames only: nothing downstream reads it
        return out

    tower.forward = forward


def enable(model, sp: SPGroup) -> None:
    """Shard ``model``'s language model over ``sp`` from now on (in place): its attention becomes
    :func:`ulysses_attention` and its forward :func:`sharded`'s. Generation (a KV cache) runs the
    plain forward."""
    check(model, sp.size)
    register()
    language_model = layers.language_model(model)
    language_model.config._attn_implementation = ATTENTION
    original = language_model.forward

    holder = _Holder()
    for module in layers.mixing_layers(language_model):  # the layers that read the layout
        module._sp_holder = holder

    def forward(*args, **kwargs):
        if kwargs.get("use_cache") or kwargs.get("past_key_values") is not None:
            holder.layout = None  # a plain forward (generation with a cache)
            return original(*args, **kwargs)
        return sharded(original, language_model, sp, holder, *args, **kwargs)

    language_model.forward = forward
    head = layers.lm_head(model)
    head_forward = head.forward

    def head_on_my_share(hidden):
        if holder.layout is None:  # a plain forward (generation): every kept position
            return head_forward(hidden)
        start, stop = shard_bounds(hidden.shape[1], sp)
        width = stop - start
        mine = hidden[:, start:stop]
        if mine.shape[1] < width:  # the last share may run past the positions: padding
            mine = F.pad(mine, (0, 0, 0, width - mine.shape[1]))
        return head_forward(mine)

    head.forward = head_on_my_share
    model._sp_group = sp
    _split_tower(_vision_tower(model), sp)
    for module in language_model.modules():
        if layers.is_deltanet(module):
            module.forward = _sharded_deltanet(module, module.forward)


def sharded(original, language_model, sp: SPGroup, holder: _Holder, input_ids=None, attention_mask=None, position_ids=None,
            past_key_values=None, inputs_embeds=None, use_cache=None, visual_pos_masks=None,
            deepstack_visual_embeds=None, **kwargs):  # fmt: skip
    """The language model's forward on this rank's shard of the sequence, its output gathered."""
    from transformers.modeling_outputs import BaseModelOutputWithPast

    if inputs_embeds is None:
        inputs_embeds = language_model.embed_tokens(input_ids)
    batch, length = inputs_embeds.shape[:2]
    if position_ids is None:
        position_ids = torch.arange(length, device=inputs_embeds.device).view(1, 1, -1).expand(3, batch, -1)
    segments = None
    if position_ids.shape[0] == 4:  # packed rows: each sequence's text positions start again at 0
        segments = (position_ids[0] == 0).long().cumsum(-1)
    if attention_mask is not None and attention_mask.dim() == 2:
        key_valid = attention_mask.bool()
    else:
        key_valid = torch.ones(batch, length, dtype=torch.bool, device=inputs_embeds.device)
    pad = (-length) % sp.size
    if pad:
        inputs_embeds = F.pad(inputs_embeds, (0, 0, 0, pad))
        position_ids = F.pad(position_ids, (0, pad))
        key_valid = F.pad(key_valid, (0, pad), value=False)
        if segments is not None:
            segments = F.pad(segments, (0, pad), value=-1)
        if visual_pos_masks is not None:
            visual_pos_masks = F.pad(visual_pos_masks, (0, pad), value=False)
    chunk = (length + pad) // sp.size
    start, stop = sp.rank * chunk, (sp.rank + 1) * chunk
    local = {}
    if visual_pos_masks is not None:
        mine = torch.zeros_like(visual_pos_masks)
        mine[:, start:stop] = visual_pos_masks[:, start:stop]
        # the deepstack rows are the visual tokens in (row, position) order; keep this shard's
        rows = mine[visual_pos_masks]
        local["visual_pos_masks"] = visual_pos_masks[:, start:stop]
        local["deepstack_visual_embeds"] = (
            None
            if deepstack_visual_embeds is None
            else [e[rows.to(e.device)] for e in deepstack_visual_embeds]
        )
    # computed once per forward, read by every layer
    holder.layout = _Layout(sp, key_valid, segments, causal_spans(key_valid, segments), start, stop)
    out = original(
        input_ids=None,
        attention_mask=None,
        position_ids=position_ids[..., start:stop],
        inputs_embeds=inputs_embeds[:, start:stop],
        use_cache=False,
        **local,
        **kwargs,
    )
    hidden = Gather.apply(out.last_hidden_state, sp, 1, True)[:, :length]
    return BaseModelOutputWithPast(last_hidden_state=hidden)


# --------------------------------------------------------------- gated DeltaNet, head-parallel


def _sharded_deltanet(module, original):
    """``module``'s forward on a sequence shard: its heads split over the group instead (the
    layer's own forward outside a sharded forward, e.g. generation with a cache)."""

    def forward(hidden_states, cache_params=None, attention_mask=None, **kwargs):
        layout: _Layout | None = module._sp_holder.layout
        if layout is None or cache_params is not None:
            return original(hidden_states, cache_params=cache_params, attention_mask=attention_mask, **kwargs)
        shared = layout_of(module)
        if layout.segments is not None and shared is None:
            raise ConfigError("packed rows cannot run through gated-DeltaNet layers (trainer.padding_free)")
        sp, m = layout.group, module
        k, hk, hv, dk, dv = sp.size, m.num_k_heads, m.num_v_heads, m.head_k_dim, m.head_v_dim
        real = layout.key_valid[:, layout.start : layout.stop].to(hidden_states.device)
        h = hidden_states * real[:, :, None].to(hidden_states.dtype)  # padding gives the state nothing
        batch, local = h.shape[:2]
        q, key, v = m.in_proj_qkv(h).split([hk * dk, hk * dk, hv * dv], dim=-1)
        parts = (q, key, v, m.in_proj_z(h), m.in_proj_b(h), m.in_proj_a(h))
        widths = [hk // k * dk, hk // k * dk, hv // k * dv, hv // k * dv, hv // k, hv // k]
        # [B, S/k, k, share]: each rank's heads side by side; then the whole sequence of mine
        shares = torch.cat(
            [p.reshape(batch, local, k, w) for p, w in zip(parts, widths, strict=True)], dim=-1
        )
        mine = AllToAll.apply(shares, sp, 2, 1)[:, :, 0]
        q, key, v, z, b, a = mine.split(widths, dim=-1)
        length = mine.shape[1]
        r = sp.rank
        channels = torch.cat(
            [
                torch.arange(r * widths[0], (r + 1) * widths[0]),
                hk * dk + torch.arange(r * widths[1], (r + 1) * widths[1]),
                2 * hk * dk + torch.arange(r * widths[2], (r + 1) * widths[2]),
            ]
        ).to(h.device)
        weight = m.conv1d.weight.squeeze(1)[channels]
        bias = None if m.conv1d.bias is None else m.conv1d.bias[channels]
        heads = slice(r * (hv // k), (r + 1) * (hv // k))
        mine_heads = DeltaNetHeads(m, weight, bias, heads, hk // k, hv // k)
        mixed = torch.cat([q, key, v], dim=-1)
        if shared is not None:  # each prompt's state starts its responses (``models/shared_prefix.py``)
            core = blockwise_deltanet(mine_heads, mixed, a, b, shared)
        else:
            core = deltanet_core(mine_heads, mixed, a, b)
        core = m.norm(core.reshape(-1, dv), z.reshape(-1, dv)).reshape(batch, length, 1, -1)
        out = AllToAll.apply(core, sp, 1, 2).reshape(batch, local, -1)  # back to my shard, all heads
        return m.out_proj(out)

    return forward
