"""Qwen3-VL (dense): patch 16 (factor 32), DeepStack vision features, text timestamps per frame pair."""

from __future__ import annotations

from .base import (
    QWEN3_VISION,
    TINY_MROPE,
    ModelFamily,
    qwen3_vision_config,
    qwen_text_config,
    qwen_token_fields,
)
from .registry import register

# the tiny models' M-RoPE split, interleaved as Qwen3-VL's
_TINY_MROPE = {**TINY_MROPE, "mrope_interleaved": True}


class Qwen3VLFamily(ModelFamily):
    def tiny_config(self, vocab_size, token_ids, hidden=128, layers=2):
        from transformers import Qwen3VLConfig

        text = qwen_text_config(vocab_size, token_ids, hidden, layers)
        text["rope_parameters"] = dict(_TINY_MROPE)
        return Qwen3VLConfig(
            text_config=text, vision_config=qwen3_vision_config(hidden), **qwen_token_fields(token_ids)
        )


FAMILY = register(
    Qwen3VLFamily(
        model_type="qwen3_vl",
        aliases=("qwen3vl",),
        vllm_architecture="Qwen3VLForConditionalGeneration",
        **QWEN3_VISION,
    )
)
