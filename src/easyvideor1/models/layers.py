"""Where the parts a forward rewires live inside a vision-language model: the decoder stack, the
LM head, the attention and gated-DeltaNet layers (sequence parallelism and the shared-prefix
layout both find them here)."""

from __future__ import annotations

import torch


def language_model(model) -> torch.nn.Module:
    """The decoder stack inside a (possibly LoRA- or FSDP-wrapped) vision-language model."""
    for name, module in model.named_modules():
        if name.endswith("language_model") and hasattr(module, "layers") and hasattr(module, "embed_tokens"):
            return module
    raise ValueError(f"{type(model).__name__} has no language model")


def lm_head(model) -> torch.nn.Module:
    for name, module in model.named_modules():
        if name.endswith("lm_head"):
            return module
    raise ValueError(f"{type(model).__name__} has no lm_head")


def is_deltanet(module) -> bool:
    """Whether ``module`` is a gated-DeltaNet (linear attention) layer, Qwen3.5's."""
    return all(
        hasattr(module, a) for a in ("in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a", "conv1d", "A_log")
    )


def mixing_layers(language: torch.nn.Module) -> list[torch.nn.Module]:
    """The layers that mix tokens (attention and gated DeltaNet): the only ones that read the
    sequence's layout; every other layer works token by token."""
    return [m for m in language.modules() if hasattr(m, "q_proj") or is_deltanet(m)]
