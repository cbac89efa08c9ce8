"""The shared-prefix layout: a group's prompt once in the row, its responses after it.

Why: in video GRPO the prompt (thousands of vision tokens) is most of every sequence and is the
same for the ``n`` responses of a group, yet a forward over ``n`` sequences runs the decoder over
it ``n`` times. Laid out as ``[prompt, response 1, ..., response n]`` the decoder reads it once: every
token-wise layer (projections, MLP, norms, the LM head) computes each token once, and only the
layers that mix tokens need to know the layout (:class:`SharedLayout`):

- attention (:func:`shared_attention`): the prompt attends to itself causally; response ``i``
  attends to the whole prompt and to itself causally, never to another response. The prompt's
  keys and values are computed once and read, in place, by every response, so gradients from all
  ``n`` responses flow back into the one prompt;
- gated DeltaNet (Qwen3.5, :func:`blockwise_deltanet`): the prompt's recurrence runs once and its
  final state starts each response's; the causal convolution of a response's first tokens reads
  the prompt's last ones, as it would in the response's own row.

Positions are the caller's: each response's continue from the prompt's end exactly as in its
own row (``models/packing.py`` computes them, M-RoPE included). A row may hold several blocks
(packing), and a block may hold a single sequence (a prompt with one response), laid out as one
causal stretch.

The layout reaches the layers through :func:`install`: the model's forward takes a
``shared_layout`` keyword and leaves it, until its next forward, where its attention and
DeltaNet layers read it (gradient checkpointing recomputes them in the backward with the same
layout); a forward without it (generation, a padded pass) runs them unchanged. Everything is
held by the model's own modules (a hook, a holder, a layer class), so a deep copy of an
installed model (a reference) runs on its own.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from .layers import is_deltanet, language_model, mixing_layers

ATTENTION = "shared_prefix_sdpa"  # the attention implementation name registered with transformers


@dataclass(frozen=True)
class Block:
    """One prompt and the responses that read it, laid out from ``start``: the prompt's
    ``prompt`` tokens, then each response's tokens in order. A block without responses is one
    causal stretch (a sequence that shares nothing)."""

    start: int
    prompt: int
    responses: tuple[int, ...] = ()

    @property
    def stop(self) -> int:
        return self.start + self.prompt + sum(self.responses)

    def response_starts(self) -> list[int]:
        out, at = [], self.start + self.prompt
        for n in self.responses:
            out.append(at)
            at += n
        return out


@dataclass(frozen=True)
class SharedLayout:
    """The blocks of one packed row, in row order (positions after the last block: padding)."""

    blocks: tuple[Block, ...]
    # each block's responses mask, built by the first attention layer that needs it on a device
    _masks: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def length(self) -> int:
        return self.blocks[-1].stop if self.blocks else 0

    def responses_mask(self, block: Block, device) -> torch.Tensor:
        """:func:`_responses_mask` of ``block``, once per forward (every layer reads the same)."""
        key = (block, str(device))
        if key not in self._masks:
            self._masks[key] = _responses_mask(block, device)
        return self._masks[key]


class _Holder:
    """The layout of the model's latest forward, read by its mixing layers."""

    layout: SharedLayout | None = None
    fallback: str | None = None  # the attention implementation a forward without a layout runs


def layout_of(module) -> SharedLayout | None:
    """The shared layout ``module`` (an attention or DeltaNet layer) runs under now, or None."""
    holder = getattr(module, "_shared_holder", None)
    return None if holder is None else holder.layout


# ------------------------------------------------------------------------------------ attention
def _responses_mask(block: Block, device) -> torch.Tensor:
    """``[responses' tokens, prompt + responses' tokens]`` bool: each response token sees the whole
    prompt and its own response up to itself."""
    seg = torch.repeat_interleave(
        torch.arange(len(block.responses), device=device), torch.tensor(block.responses, device=device)
    )
    n = len(seg)
    own = (seg[:, None] == seg[None, :]) & torch.ones(n, n, dtype=torch.bool, device=device).tril()
    return torch.cat([torch.ones(n, block.prompt, dtype=torch.bool, device=device), own], dim=1)


def shared_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    layout: SharedLayout,
    dropout: float = 0.0,
    scale: float | None = None,
) -> torch.Tensor:
    """``[1, H, S, D]`` attention of a row laid out as ``layout`` (``k``/``v`` may have fewer heads:
    grouped-query attention). Per block, two kernel calls on views of the row (no copy of the
    prompt's keys): the prompt causally on itself, then all its responses at once on the block's
    keys (prompt and responses) under a ``responses x block`` mask that keeps each response to the
    prompt and to itself (never ``S x S``). Positions after the last block (padding) are zeros."""
    if q.shape[0] != 1:
        raise ValueError(f"a shared-prefix row is one row, not {q.shape[0]}")
    gqa = k.shape[1] != q.shape[1]
    length = q.shape[2]

    def attend(rows: slice, keys: slice, **kw):
        return F.scaled_dot_product_attention(
            q[:, :, rows], k[:, :, keys], v[:, :, keys], dropout_p=dropout, scale=scale, enable_gqa=gqa, **kw
        )

    pieces: list[torch.Tensor] = []
    at = 0
    for block in layout.blocks:
        if block.start > at:
            pieces.append(q.new_zeros(1, q.shape[1], block.start - at, v.shape[-1]))
        prompt_end = block.start + block.prompt
        pieces.append(attend(slice(block.start, prompt_end), slice(block.start, prompt_end), is_causal=True))
        if block.responses:
            mask = layout.responses_mask(block, q.device)
            pieces.append(
                attend(slice(prompt_end, block.stop), slice(block.start, block.stop), attn_mask=mask)
            )
        at = block.stop
    if at < length:
        pieces.append(q.new_zeros(1, q.shape[1], length - at, v.shape[-1]))
    return torch.cat(pieces, dim=2)


def _attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """The registered attention function: the shared layout when the forward has one, else the
    implementation the model had (sdpa, flash-attention, eager)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    holder = module._shared_holder
    if holder.layout is None:
        if holder.fallback in ALL_ATTENTION_FUNCTIONS:
            fallback = ALL_ATTENTION_FUNCTIONS[holder.fallback]
        else:  # eager: the modeling file's own
            fallback = importlib.import_module(type(module).__module__).eager_attention_forward
        return fallback(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)
    p = dropout if module.training else 0.0
    out = shared_attention(query, key, value, holder.layout, p, scaling)
    return out.transpose(1, 2).contiguous(), None


def _register(fallback: str | None) -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, _attention)
    # a forward without a layout gets the mask its own implementation would build; with one, the
    # row's positions run without restarts (``models/packing.py``) and sdpa's is a causal no-op
    mask = ALL_MASK_ATTENTION_FUNCTIONS.get(fallback) if fallback else None
    AttentionMaskInterface.register(ATTENTION, mask or sdpa_mask)


# --------------------------------------------------------------------------------- gated DeltaNet
@dataclass
class DeltaNetHeads:
    """What :func:`blockwise_deltanet` needs of a gated-DeltaNet layer for the heads it runs:
    ``conv_weight``/``conv_bias`` of their channels, ``heads`` (their slice of the value heads),
    and the layer for its dimensions, activation, gates and kernels."""

    layer: torch.nn.Module
    conv_weight: torch.Tensor
    conv_bias: torch.Tensor | None
    heads: slice
    k_heads: int  # key heads run here
    v_heads: int  # value heads run here


def _conv(h: DeltaNetHeads, x: torch.Tensor) -> torch.Tensor:
    """The causal depthwise convolution of ``x [N, T, C]`` from the start of ``x``."""
    kernels = sys.modules[type(h.layer).__module__]
    out = kernels.causal_conv1d_fn(
        x.transpose(1, 2), h.conv_weight, h.conv_bias, activation=h.layer.activation
    )
    return out.transpose(1, 2)


def _recurrence(h: DeltaNetHeads, mixed, a, b, initial_state, final: bool):
    """The gated delta rule over convolved ``mixed [N, T, C]`` with gates from ``a``/``b``
    ``[N, T, heads]``: (output ``[N, T, heads, dv]``, final state or None)."""
    m = h.layer
    kernels = sys.modules[type(m).__module__]
    n, t = mixed.shape[:2]
    kd, vd = h.k_heads * m.head_k_dim, h.v_heads * m.head_v_dim
    q, key, v = mixed.split([kd, kd, vd], dim=-1)
    q = q.reshape(n, t, h.k_heads, m.head_k_dim)
    key = key.reshape(n, t, h.k_heads, m.head_k_dim)
    v = v.reshape(n, t, h.v_heads, m.head_v_dim)
    beta = b.sigmoid()
    g = -m.A_log[h.heads].float().exp() * F.softplus(a.float() + m.dt_bias[h.heads])
    if h.v_heads // h.k_heads > 1:
        q = q.repeat_interleave(h.v_heads // h.k_heads, dim=2)
        key = key.repeat_interleave(h.v_heads // h.k_heads, dim=2)
    return kernels.torch_chunk_gated_delta_rule(
        q,
        key,
        v,
        g=g,
        beta=beta,
        initial_state=initial_state,
        output_final_state=final,
        use_qk_l2norm_in_kernel=True,
    )


def _stack(parts: list[torch.Tensor], length: int) -> torch.Tensor:
    """``[T_i, ...]`` tensors right-padded with zeros to ``length`` and stacked."""
    return torch.stack([F.pad(p, (0,) * (2 * (p.dim() - 1)) + (0, length - p.shape[0])) for p in parts])


def deltanet_core(h: DeltaNetHeads, mixed, a, b) -> torch.Tensor:
    """The gated-DeltaNet core of rows that each hold one sequence: ``[N, T, heads, dv]``."""
    return _recurrence(h, _conv(h, mixed), a, b, None, False)[0]


def blockwise_deltanet(h: DeltaNetHeads, mixed, a, b, layout: SharedLayout) -> torch.Tensor:
    """The gated-DeltaNet core (convolution and recurrence) of one row laid out as ``layout``:
    ``mixed [1, S, C]`` (the layer's ``in_proj_qkv`` output for the heads ``h`` runs), gates
    ``a``/``b`` ``[1, S, heads]``; returns ``[1, S, heads, dv]`` (zeros after the last block).

    Each prompt runs from a zero state; each of its responses starts from the prompt's final
    state, its convolution reading the prompt's last ``kernel - 1`` inputs first: what the
    response's own row computes at its positions."""
    m = h.layer
    tail_len = m.conv_kernel_size - 1
    mixed, a, b = mixed[0], a[0], b[0]
    length = mixed.shape[0]
    pieces: list[torch.Tensor] = []
    at = 0
    for block in layout.blocks:
        if block.start > at:
            pieces.append(mixed.new_zeros(block.start - at, h.v_heads, m.head_v_dim))
        p0, p1 = block.start, block.start + block.prompt
        out, state = _recurrence(
            h, _conv(h, mixed[None, p0:p1]), a[None, p0:p1], b[None, p0:p1], None, bool(block.responses)
        )
        pieces.append(out[0])
        if block.responses:
            spans = [(s, s + n) for s, n in zip(block.response_starts(), block.responses, strict=True)]
            widest = max(block.responses)
            tail = mixed[max(p0, p1 - tail_len) : p1]
            # the convolution of each response continues the prompt's: its first outputs read the
            # prompt's last inputs (those outputs of the tail itself are the prompt's, dropped)
            conv_in = _stack([torch.cat([tail, mixed[s:e]]) for s, e in spans], len(tail) + widest)
            conv_out = _conv(h, conv_in)[:, len(tail) :]
            states = state.expand(len(spans), *state.shape[1:])
            out, _ = _recurrence(
                h, conv_out, _stack([a[s:e] for s, e in spans], widest), _stack([b[s:e] for s, e in spans], widest),
                states, False,
            )  # fmt: skip
            pieces.extend(out[i, : e - s] for i, (s, e) in enumerate(spans))
        at = block.stop
    if at < length:
        pieces.append(mixed.new_zeros(length - at, h.v_heads, m.head_v_dim))
    return torch.cat(pieces)[None]


class _SharedDeltaNet:
    """Mixed into a gated-DeltaNet layer's class (:func:`install`): :func:`blockwise_deltanet`
    under a shared layout, the layer's own forward otherwise (generation with a cache, a padded
    forward). A class, not a replaced ``forward``, so a deep copy of the model stays its own."""

    def forward(self, hidden_states, cache_params=None, attention_mask=None, **kwargs):
        layout = self._shared_holder.layout
        if layout is None or cache_params is not None:
            return super().forward(
                hidden_states, cache_params=cache_params, attention_mask=attention_mask, **kwargs
            )
        heads = DeltaNetHeads(
            self,
            self.conv1d.weight.squeeze(1),
            self.conv1d.bias,
            slice(None),
            self.num_k_heads,
            self.num_v_heads,
        )
        h = hidden_states
        core = blockwise_deltanet(heads, self.in_proj_qkv(h), self.in_proj_a(h), self.in_proj_b(h), layout)
        batch, length = h.shape[:2]
        z = self.in_proj_z(h).reshape(-1, self.head_v_dim)
        core = self.norm(core.reshape(-1, self.head_v_dim), z).reshape(batch, length, -1)
        return self.out_proj(core)


_SHARED_CLASSES: dict[type, type] = {}


def _shared_class(cls: type) -> type:
    if cls not in _SHARED_CLASSES:
        # in the modeling file's module, whose kernels (convolution, recurrence) the layer runs
        _SHARED_CLASSES[cls] = type(
            f"Shared{cls.__name__}", (_SharedDeltaNet, cls), {"__module__": cls.__module__}
        )
    return _SHARED_CLASSES[cls]


def _take_layout(module, args, kwargs):
    """The model's forward pre-hook: the ``shared_layout`` keyword (or none) becomes the layout
    its layers read until its next forward."""
    module._shared_holder.layout = kwargs.pop("shared_layout", None)
    return args, kwargs


# ------------------------------------------------------------------------------------ the model
def install(model) -> None:
    """Let ``model`` run shared-prefix rows (in place, once): its forward takes ``shared_layout``
    and its mixing layers read it. Under sequence parallelism the Ulysses attention and DeltaNet
    read it themselves after their exchanges (``models/sequence_parallel.py``)."""
    if getattr(model, "_shared_holder", None) is not None:
        return
    language = language_model(model)
    holder = getattr(language, "_shared_holder", None)  # another wrapper of the same layers
    if holder is None:
        holder = _Holder()
        language._shared_holder = holder
        for module in mixing_layers(language):
            module._shared_holder = holder
        if getattr(model, "_sp_group", None) is None:
            holder.fallback = language.config._attn_implementation
            _register(holder.fallback)
            language.config._attn_implementation = ATTENTION
            for module in language.modules():
                if is_deltanet(module):
                    module.__class__ = _shared_class(type(module))
    model._shared_holder = holder
    model.register_forward_pre_hook(_take_layout, with_kwargs=True)
