"""Qwen3-VL (dense): patch 16 (factor 32), DeepStack vision features, text timestamps per frame pair."""

from __future__ import annotations

from .base import EngineFacts, Frames, ModelFamily, TinyFixture, VisionLayout
from .registry import register
from .tiny_configs import TINY_MROPE, qwen3_vision_config, tiny_qwen_config

# the frame grid and processor Qwen3-VL and Qwen3.5 (dense and MoE) share
QWEN3_FRAMES = Frames(patch_size=16)
QWEN3_VISION = VisionLayout(
    processor_class="Qwen3VLProcessor",
    video_processor_class="Qwen3VLVideoProcessor",
    cap_pixels_per_frame=True,
)

# the tiny models' M-RoPE split, interleaved as Qwen3-VL's
TINY_MROPE_INTERLEAVED = {**TINY_MROPE, "mrope_interleaved": True}


def tiny_config(vocab_size, token_ids, hidden=128, layers=2, config_class="Qwen3VLConfig", **text_fields):
    """A tiny Qwen3-VL config (``config_class`` and ``text_fields``: Qwen3-VL-MoE's)."""
    return tiny_qwen_config(
        config_class,
        vocab_size,
        token_ids,
        hidden,
        layers,
        qwen3_vision_config(hidden),
        rope_parameters=dict(TINY_MROPE_INTERLEAVED),
        **text_fields,
    )


# The released sizes: their config.json fields that decide the architecture. Every size has the
# Qwen tokenizer (its vocabulary and placeholder ids), 8 KV heads of 128 and 256K positions, and a
# tower of 16 heads on 16-pixel patches, 2 frames deep, merged 2x2 into tokens of the LM's width.
# The placeholder ids are Qwen2.5-VL's too (its table reads them here)
QWEN_VL_TOKEN_IDS = dict(
    image_token_id=151655, video_token_id=151656, vision_start_token_id=151652, vision_end_token_id=151653
)
_RELEASED_TEXT = dict(head_dim=128, num_key_value_heads=8, vocab_size=151936, max_position_embeddings=262144)
_RELEASED_VISION = dict(
    num_heads=16, num_position_embeddings=2304, patch_size=16, spatial_merge_size=2, temporal_patch_size=2
)
# the 2B and 4B sizes' tower, and the 8B's (Qwen3-VL-MoE's too)
_SMALL_TOWER = dict(depth=24, hidden_size=1024, intermediate_size=4096, deepstack_visual_indexes=[5, 11, 17])
LARGE_TOWER = dict(depth=27, hidden_size=1152, intermediate_size=4304, deepstack_visual_indexes=[8, 16, 24])


def released_size(tied: bool, hidden: int, intermediate: int, layers: int, heads: int, tower: dict) -> dict:
    """One released Qwen3-VL size's ``config.json`` fields: its LM head ``tied`` to the embedding
    or not, its decoder's width, MLP width, layers and attention heads, and its ``tower``."""
    text = dict(
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
    )
    return {
        **QWEN_VL_TOKEN_IDS,
        "tie_word_embeddings": tied,
        "text_config": {**_RELEASED_TEXT, **text, "tie_word_embeddings": tied},
        "vision_config": {**_RELEASED_VISION, **tower, "out_hidden_size": hidden},
    }


# hub name: (tied, hidden, MLP width, layers, heads, tower)
_SIZES = {
    "Qwen/Qwen3-VL-2B-Instruct": (True, 2048, 6144, 28, 16, _SMALL_TOWER),
    "Qwen/Qwen3-VL-4B-Instruct": (True, 2560, 9728, 36, 32, _SMALL_TOWER),
    "Qwen/Qwen3-VL-8B-Instruct": (False, 4096, 12288, 36, 32, LARGE_TOWER),
}
RELEASED = {name: released_size(*size) for name, size in _SIZES.items()}


FAMILY = register(
    ModelFamily(
        model_type="qwen3_vl",
        aliases=("qwen3vl",),
        frames=QWEN3_FRAMES,
        vision=QWEN3_VISION,
        engine=EngineFacts("Qwen3VLForConditionalGeneration"),
        fixture=TinyFixture(tiny_config),
        released=RELEASED,
    )
)
