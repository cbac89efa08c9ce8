"""A run's model architecture without its weights: the facts of its language model and vision
tower, and its exact parameter counts.

The facts come from the checkpoint's ``config.json`` (``model.path`` a model directory) or, for a
released size named by its hub name, from the table its family holds (``ModelFamily.released``).
The counts come from the real transformers model built on the ``meta`` device (no memory, no
weights) and walked module by module, found where the rest of the package finds them: the
decoder stack and LM head (``models/layers.py``), the vision tower (the family's
``VisionLayout``), the FSDP2 shard units (``EngineFacts.shard_modules``) and the LoRA targets
(``models/lora.py``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from ..errors import ConfigError
from ..models.families import family_of_checkpoint, get_family
from ..models.families.registry import released_config, released_names
from ..models.layers import is_deltanet, language_model, lm_head, mixing_layers
from ..models.lora import default_targets, matches_target


@dataclass(frozen=True)
class TextFacts:
    """The language model.

    Attributes:
        hidden / layers / heads / kv_heads / head_dim / intermediate / vocab: Its widths and depth
            (``intermediate``: the dense MLP's, 0 when every layer's MLP is experts).
        tied_embeddings: The LM head is the input embedding (one tensor).
        attention_layers: Layers with softmax attention (those hold a KV cache).
        linear_layers: Gated-DeltaNet layers (Qwen3.5), each holding a fixed-size state per sequence.
        linear_state_elements: Elements of one such layer's state per sequence, as vLLM holds it:
            the convolution's last ``kernel - 1`` inputs plus the recurrent state (heads x k x v).
        experts / experts_per_token / expert_intermediate: The MoE's routed experts, how many a
            token goes through, one expert's MLP width (0 for dense models).
        shared_expert_intermediate: The width of the MLP every token also goes through beside its
            routed experts (0 without one).
    """

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied_embeddings: bool
    attention_layers: int
    linear_layers: int = 0
    linear_state_elements: int = 0
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0
    shared_expert_intermediate: int = 0


@dataclass(frozen=True)
class VisionFacts:
    """The vision tower. Where the family's tower has no such field (InternViT: no temporal patch,
    a pixel shuffle for the merge) the value is the one the family's frame grid implies.

    Attributes:
        depth / hidden / intermediate / heads: The tower's blocks and widths.
        patch_size / temporal_patch_size / merge_size: Pixels per patch side, frames per temporal
            patch, patches per token side after the merger.
        out_hidden: Width of the merged tokens (the language model's).
        deepstack: DeepStack feature taps into the decoder (Qwen3-VL).
    """

    depth: int
    hidden: int
    intermediate: int
    heads: int
    patch_size: int
    temporal_patch_size: int
    merge_size: int
    out_hidden: int
    deepstack: int = 0


@dataclass(frozen=True)
class LinearLayer:
    """One ``nn.Linear`` of the model, as LoRA sees it.

    Attributes:
        name: Its module name (``model.language_model.layers.0.self_attn.q_proj``).
        in_features / out_features: Its shape.
        tower: It belongs to the vision side (tower, merger, InternVL's projector).
        default: ``model.lora`` adapts it when ``target_modules`` is empty and ``vision`` is true
            (every linear layer but the LM head and MoE routers).
    """

    name: str
    in_features: int
    out_features: int
    tower: bool
    default: bool


@dataclass(frozen=True)
class ParamCounts:
    """Exact parameter counts, from the model built on the meta device.

    Attributes:
        vision: The vision side: the tower, its merger(s), InternVL's projector.
        embeddings: The input embedding table.
        layers: The decoder layers and the final norm.
        lm_head: The LM head's weight; 0 when tied to the embeddings.
        total: Distinct parameters (a tied weight once), the sum of the four above.
        largest_tensor: Elements of the largest single parameter (the weight push's biggest tensor).
        largest_unit: Parameters of the largest FSDP2 shard unit (one decoder layer or vision block).
        root_unit: Parameters in no shard unit (embeddings, LM head, norms, patch embedding and
            merger): what the root ``fully_shard`` gathers.
        active_per_token: Language-model parameters one token's forward multiplies by: attention,
            MLP (an MoE's routed top-k and shared experts) and the LM head (tied or not), not the
            embedding lookup.
        lora_targets: Every linear layer, for :meth:`lora_params`.
    """

    vision: int
    embeddings: int
    layers: int
    lm_head: int
    total: int
    largest_tensor: int
    largest_unit: int
    root_unit: int
    active_per_token: int
    lora_targets: tuple[LinearLayer, ...]

    def lora_params(self, rank: int, target_modules: list[str], vision: bool) -> int:
        """Parameters of the adapters ``model.lora`` (``rank``, ``target_modules``, ``vision``)
        attaches, exactly as ``models/lora.py`` picks the layers: the named ones, PEFT's way, or
        by default every one the LoRA defaults take (the tower's only with ``vision``). Each
        adapted layer gets ``A`` (rank x in) and ``B`` (out x rank)."""
        if target_modules:
            unmatched = [
                e for e in target_modules if not any(matches_target(t.name, e) for t in self.lora_targets)
            ]
            if unmatched:
                raise ConfigError(
                    f"model.lora.target_modules: {unmatched} match no linear layer of the model"
                )
            chosen = [t for t in self.lora_targets if any(matches_target(t.name, e) for e in target_modules)]
        else:
            chosen = [t for t in self.lora_targets if t.default and (vision or not t.tower)]
        return rank * sum(t.in_features + t.out_features for t in chosen)


@dataclass(frozen=True)
class Architecture:
    """A model's architecture facts and parameter counts.

    Attributes:
        name: The ``model.path`` or released name it came from.
        model_type: Its ``config.json`` ``model_type`` (the family).
    """

    name: str
    model_type: str
    text: TextFacts
    vision: VisionFacts
    params: ParamCounts

    @classmethod
    def from_config(cls, config, name: str) -> Architecture:
        """The architecture of a transformers ``PretrainedConfig`` of a registered family."""
        from transformers import AutoModelForImageTextToText

        family = get_family(config.model_type)
        with torch.device("meta"):
            model = AutoModelForImageTextToText.from_config(config)
        text = _text_facts(model, family)
        return cls(
            name=name,
            model_type=family.model_type,
            text=text,
            vision=_vision_facts(model, family),
            params=_param_counts(model, family, text),
        )


def architecture(model_path: str) -> Architecture:
    """The architecture of ``model_path``: the model directory's ``config.json``, else a released
    size a family's table knows (its hub name, any case, or its last part)."""
    from transformers import AutoConfig

    if os.path.isfile(os.path.join(model_path, "config.json")):
        family_of_checkpoint(model_path)  # one line for a model type no family answers to
        return Architecture.from_config(AutoConfig.from_pretrained(model_path), model_path)
    fields = released_config(model_path)
    if fields is None:
        raise ConfigError(
            f"model.path {model_path}: no config.json there and not a released size the planner knows "
            f"(known: {', '.join(released_names())})"
        )
    return Architecture.from_config(AutoConfig.for_model(**fields), model_path)


def _text_facts(model, family) -> TextFacts:
    text = model.config.get_text_config()
    language = language_model(model)
    mixing = mixing_layers(language)
    deltanets = [m for m in mixing if is_deltanet(m)]
    moe = _moe_facts(text) if family.engine.moe else {}
    return TextFacts(
        hidden=text.hidden_size,
        layers=text.num_hidden_layers,
        heads=text.num_attention_heads,
        kv_heads=text.num_key_value_heads,
        head_dim=getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads,
        intermediate=text.intermediate_size if any(_dense_mlp(layer) for layer in language.layers) else 0,
        vocab=text.vocab_size,
        tied_embeddings=_tied(model),
        attention_layers=len(mixing) - len(deltanets),
        linear_layers=len(deltanets),
        linear_state_elements=_deltanet_state(deltanets[0]) if deltanets else 0,
        **moe,
    )


def _dense_mlp(layer) -> bool:
    """Whether a decoder layer's MLP is one dense MLP (not routed experts)."""
    return not hasattr(layer.mlp, "experts")


def _moe_facts(text) -> dict[str, int]:
    """The routed and shared experts, under Qwen's (``num_experts``, a shared expert's own width)
    or GLM's (``n_routed_experts``, ``n_shared_experts`` of the routed width) config names."""
    expert = text.moe_intermediate_size
    shared = getattr(text, "shared_expert_intermediate_size", None) or expert * getattr(
        text, "n_shared_experts", 0
    )
    return dict(
        experts=getattr(text, "num_experts", None) or text.n_routed_experts,
        experts_per_token=text.num_experts_per_tok,
        expert_intermediate=expert,
        shared_expert_intermediate=shared,
    )


def _deltanet_state(layer) -> int:
    """One gated-DeltaNet layer's state per sequence (vLLM's ``gated_delta_net_state_shape``)."""
    return (
        layer.conv_dim * (layer.conv_kernel_size - 1)
        + layer.num_v_heads * layer.head_k_dim * layer.head_v_dim
    )


def _tied(model) -> bool:
    return lm_head(model).weight is language_model(model).embed_tokens.weight


# Each VisionFacts field's names in the tower's config, tried in order: the Qwen-VL and GLM towers
# name them alike; InternViT says num_hidden_layers and num_attention_heads; Qwen2-VL's tower width
# is embed_dim (its hidden_size is the merger's output)
_VISION_NAMES = {
    "depth": ("depth", "num_hidden_layers"),
    "hidden": ("embed_dim", "hidden_size"),
    "heads": ("num_heads", "num_attention_heads"),
}


def _vision_facts(model, family) -> VisionFacts:
    vision = model.config.vision_config
    named = {
        key: next(getattr(vision, n) for n in names if hasattr(vision, n))
        for key, names in _VISION_NAMES.items()
    }
    # Qwen2-VL gives its MLP as a ratio of the width
    intermediate = getattr(vision, "intermediate_size", None) or int(named["hidden"] * vision.mlp_ratio)
    patch = getattr(vision, "patch_size", None) or family.frames.patch_size
    return VisionFacts(
        **named,
        intermediate=intermediate,
        patch_size=patch if isinstance(patch, int) else patch[0],
        temporal_patch_size=getattr(vision, "temporal_patch_size", None) or family.frames.temporal_patch_size,
        merge_size=getattr(vision, "spatial_merge_size", None) or family.frames.merge_size,
        # the merger (InternVL: the projector) maps the tower's tokens to the language model's width
        out_hidden=getattr(vision, "out_hidden_size", None) or model.config.get_text_config().hidden_size,
        deepstack=len(getattr(vision, "deepstack_visual_indexes", None) or ()),
    )


def _numel(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def _param_counts(model, family, text: TextFacts) -> ParamCounts:
    language = language_model(model)
    embeddings = language.embed_tokens.weight.numel()
    head = lm_head(model).weight.numel()
    vision = sum(_numel(m) for m in family.vision.modules(model))
    counts = dict(
        vision=vision,
        embeddings=embeddings,
        layers=_numel(language) - embeddings,
        lm_head=0 if _tied(model) else head,
    )
    total = _numel(model)
    if total != sum(counts.values()):
        raise RuntimeError(
            f"{type(model).__name__}: {total} parameters but the tower, embeddings, decoder and LM head "
            f"hold {sum(counts.values())}: a part of the model is not counted"
        )
    units = [_numel(m) for m in family.engine.shard_modules(model)]
    return ParamCounts(
        **counts,
        total=total,
        largest_tensor=max(p.numel() for p in model.parameters()),
        largest_unit=max(units),
        root_unit=total - sum(units),
        active_per_token=counts["layers"] - _idle_expert_params(language, text) + head,
        lora_targets=_linear_layers(model, family),
    )


def _idle_expert_params(language, text: TextFacts) -> int:
    """Routed-expert parameters one token does not go through: all but its top-k of each MoE layer
    (every expert is the same size). The experts are each layer's ``mlp.experts`` module."""
    experts = [_numel(m) for name, m in language.named_modules() if name.rsplit(".", 1)[-1] == "experts"]
    if not experts:
        return 0
    return sum(experts) // text.experts * (text.experts - text.experts_per_token)


def _linear_layers(model, family) -> tuple[LinearLayer, ...]:
    tower = {id(m) for v in family.vision.modules(model) for m in v.modules()}
    default = set(default_targets(model, vision=True))
    return tuple(
        LinearLayer(name, m.in_features, m.out_features, tower=id(m) in tower, default=name in default)
        for name, m in model.named_modules()
        if isinstance(m, torch.nn.Linear)
    )
