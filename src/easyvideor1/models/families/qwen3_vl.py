"""Qwen3-VL (dense): patch 16 (factor 32), DeepStack vision features, text timestamps per frame pair."""

from __future__ import annotations

from .base import QWEN3_VISION, TINY_MROPE, ModelFamily, qwen3_vision_config, tiny_qwen_config
from .registry import register

# the tiny models' M-RoPE split, interleaved as Qwen3-VL's
_TINY_MROPE = {**TINY_MROPE, "mrope_interleaved": True}


class Qwen3VLFamily(ModelFamily):
    def tiny_config(self, vocab_size, token_ids, hidden=128, layers=2):
        vision = qwen3_vision_config(hidden)
        return tiny_qwen_config(
            "Qwen3VLConfig", vocab_size, token_ids, hidden, layers, vision, rope_parameters=dict(_TINY_MROPE)
        )


FAMILY = register(
    Qwen3VLFamily(
        model_type="qwen3_vl",
        aliases=("qwen3vl",),
        vllm_architecture="Qwen3VLForConditionalGeneration",
        **QWEN3_VISION,
    )
)
