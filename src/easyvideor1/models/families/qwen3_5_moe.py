"""Qwen3.5-MoE: Qwen3.5's hybrid decoder with routed + shared experts in every layer."""

from __future__ import annotations

from .base import (
    QWEN3_FRAMES,
    QWEN3_VISION,
    ModelFamily,
    TinyFixture,
    moe_engine,
    qwen3_vision_config,
    qwen_token_fields,
)
from .qwen3_5 import QWEN3_5_DECODER, QWEN3_5_TOKENS, hybrid_text_config
from .registry import register


def tiny_config(vocab_size, token_ids, hidden=128, layers=2):
    from transformers import Qwen3_5MoeConfig

    text = hybrid_text_config(vocab_size, token_ids, hidden, max(layers, 2))
    text.pop("intermediate_size")
    text.update(
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=hidden,
        shared_expert_intermediate_size=hidden,
    )
    return Qwen3_5MoeConfig(
        text_config=text,
        vision_config=qwen3_vision_config(hidden, deepstack=False),
        **qwen_token_fields(token_ids),
    )


FAMILY = register(
    ModelFamily(
        model_type="qwen3_5_moe",
        aliases=("qwen3.5_moe", "qwen35moe", "qwen3_5moe"),
        frames=QWEN3_FRAMES,
        tokens=QWEN3_5_TOKENS,
        vision=QWEN3_VISION,
        engine=moe_engine("Qwen3_5MoeForConditionalGeneration", **QWEN3_5_DECODER),
        fixture=TinyFixture(tiny_config),
    )
)
