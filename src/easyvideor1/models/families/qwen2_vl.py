"""Qwen2-VL: patch 14 (factor 28), full attention in the vision tower, M-RoPE."""

from __future__ import annotations

from .base import (
    QWEN2_FRAMES,
    TINY_MROPE,
    EngineFacts,
    ModelFamily,
    TinyFixture,
    qwen2_vision,
    tiny_qwen_config,
    tiny_vision_config,
)
from .registry import register


def tiny_config(vocab_size, token_ids, hidden=128, layers=2):
    # Qwen2-VL's vision hidden_size is the merger's output (the LM width)
    vision = tiny_vision_config(14, embed_dim=64, hidden_size=hidden, mlp_ratio=2)
    return tiny_qwen_config(
        "Qwen2VLConfig", vocab_size, token_ids, hidden, layers, vision, rope_parameters=dict(TINY_MROPE)
    )


FAMILY = register(
    ModelFamily(
        model_type="qwen2_vl",
        aliases=("qwen2vl",),
        frames=QWEN2_FRAMES,
        vision=qwen2_vision("Qwen2VLProcessor"),
        engine=EngineFacts("Qwen2VLForConditionalGeneration"),
        fixture=TinyFixture(tiny_config),
    )
)
