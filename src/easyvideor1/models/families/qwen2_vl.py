"""Qwen2-VL: patch 14 (factor 28), full attention in the vision tower, M-RoPE."""

from __future__ import annotations

from .base import QWEN2_VISION, TINY_MROPE, ModelFamily, tiny_qwen_config, tiny_vision_config
from .registry import register


class Qwen2VLFamily(ModelFamily):
    def tiny_config(self, vocab_size, token_ids, hidden=128, layers=2):
        # Qwen2-VL's vision hidden_size is the merger's output (the LM width)
        vision = tiny_vision_config(14, embed_dim=64, hidden_size=hidden, mlp_ratio=2)
        return tiny_qwen_config(
            "Qwen2VLConfig", vocab_size, token_ids, hidden, layers, vision, rope_parameters=dict(TINY_MROPE)
        )


FAMILY = register(
    Qwen2VLFamily(
        model_type="qwen2_vl",
        aliases=("qwen2vl",),
        processor_class="Qwen2VLProcessor",
        vllm_architecture="Qwen2VLForConditionalGeneration",
        **QWEN2_VISION,
    )
)
