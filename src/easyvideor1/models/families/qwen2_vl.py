"""Qwen2-VL: patch 14 (factor 28), full attention in the vision tower, M-RoPE."""

from __future__ import annotations

from .base import ModelFamily, qwen_text_config, qwen_token_fields
from .registry import register


class Qwen2VLFamily(ModelFamily):
    def tiny_config(self, vocab_size, token_ids, hidden=128, layers=2):
        from transformers import Qwen2VLConfig

        text = qwen_text_config(vocab_size, token_ids, hidden, layers)
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [6, 5, 5]}
        vision = dict(
            depth=2,
            embed_dim=64,
            hidden_size=hidden,  # Qwen2-VL's vision hidden_size is the merger's output (the LM width)
            mlp_ratio=2,
            num_heads=2,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
        )
        return Qwen2VLConfig(text_config=text, vision_config=vision, **qwen_token_fields(token_ids))


FAMILY = register(
    Qwen2VLFamily(
        model_type="qwen2_vl",
        aliases=("qwen2vl",),
        patch_size=14,
        processor_class="Qwen2VLProcessor",
        video_processor_class="Qwen2VLVideoProcessor",
        cap_pixels_per_frame=True,
        vllm_architecture="Qwen2VLForConditionalGeneration",
    )
)
