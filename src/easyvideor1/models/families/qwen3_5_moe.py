"""Qwen3.5-MoE: Qwen3.5's hybrid decoder with routed + shared experts in every layer."""

from __future__ import annotations

from .base import moe_family
from .qwen3_5 import FAMILY as QWEN3_5
from .qwen3_5 import hybrid_text_config
from .registry import register
from .tiny_configs import qwen3_vision_config, qwen_token_fields


def tiny_config(vocab_size, token_ids, hidden=128, layers=2):
    from transformers import Qwen3_5MoeConfig

    text = hybrid_text_config(vocab_size, token_ids, hidden, max(layers, 2))
    text.pop("intermediate_size")
    text.update(
        num_experts=4,
        num_experts_per_tok=2,
        # experts 96 wide keep the model under 1.1M parameters beside two linear-attention key heads
        moe_intermediate_size=hidden * 3 // 4,
        shared_expert_intermediate_size=hidden,
    )
    return Qwen3_5MoeConfig(
        text_config=text,
        vision_config=qwen3_vision_config(hidden, deepstack=False),
        **qwen_token_fields(token_ids),
    )


# Qwen3.5 with experts: its thinking switch and hybrid decoder's vLLM facts too
FAMILY = register(
    moe_family(
        QWEN3_5,
        "qwen3_5_moe",
        ("qwen3.5_moe", "qwen35moe", "qwen3_5moe"),
        "Qwen3_5MoeForConditionalGeneration",
        tiny_config,
    )
)
