"""Qwen3-VL (dense): patch 16 (factor 32), DeepStack vision features, text timestamps per frame pair."""

from __future__ import annotations

from .base import ModelFamily, qwen3_vision_config, qwen_text_config, qwen_token_fields
from .registry import register

# M-RoPE split of the tiny model's rotary dims (head_dim 32 -> 16 frequencies), interleaved as Qwen3-VL
_TINY_MROPE = {
    "rope_type": "default",
    "rope_theta": 10000.0,
    "mrope_section": [6, 5, 5],
    "mrope_interleaved": True,
}


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
        patch_size=16,
        processor_class="Qwen3VLProcessor",
        video_processor_class="Qwen3VLVideoProcessor",
        cap_pixels_per_frame=True,
        vllm_architecture="Qwen3VLForConditionalGeneration",
    )
)
