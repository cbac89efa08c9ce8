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


# The released sizes' config.json: what every size shares (the Qwen tokenizer's ids, the decoder's
# heads and rotary, the tower's patches), then each size's widths and depths
_RELEASED_TEXT = dict(
    attention_bias=False,
    bos_token_id=151643,
    eos_token_id=151645,
    head_dim=128,
    hidden_act="silu",
    max_position_embeddings=262144,
    num_key_value_heads=8,
    rms_norm_eps=1e-06,
    rope_scaling={"mrope_interleaved": True, "mrope_section": [24, 20, 20], "rope_type": "default"},
    rope_theta=5000000,
    vocab_size=151936,
)
_RELEASED_VISION = dict(
    hidden_act="gelu_pytorch_tanh",
    in_channels=3,
    num_heads=16,
    num_position_embeddings=2304,
    patch_size=16,
    spatial_merge_size=2,
    temporal_patch_size=2,
)
# the placeholder ids of the Qwen2.5-VL and Qwen3-VL tokenizers (Qwen2.5-VL's table reads them here)
QWEN_VL_TOKEN_IDS = dict(
    image_token_id=151655, video_token_id=151656, vision_start_token_id=151652, vision_end_token_id=151653
)


def released_size(tied: bool, text: dict, vision: dict) -> dict:
    """One released Qwen3-VL size's ``config.json`` fields: the shared ones plus its ``text`` and
    ``vision`` widths and depths; ``tied``: its LM head is its input embedding."""
    return {
        **QWEN_VL_TOKEN_IDS,
        "tie_word_embeddings": tied,
        "text_config": {**_RELEASED_TEXT, "tie_word_embeddings": tied, **text},
        "vision_config": {**_RELEASED_VISION, **vision},
    }


RELEASED = {
    "Qwen/Qwen3-VL-2B-Instruct": released_size(
        tied=True,
        text=dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16),
        vision=dict(
            depth=24,
            hidden_size=1024,
            intermediate_size=4096,
            out_hidden_size=2048,
            deepstack_visual_indexes=[5, 11, 17],
        ),
    ),
    "Qwen/Qwen3-VL-4B-Instruct": released_size(
        tied=True,
        text=dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32),
        vision=dict(
            depth=24,
            hidden_size=1024,
            intermediate_size=4096,
            out_hidden_size=2560,
            deepstack_visual_indexes=[5, 11, 17],
        ),
    ),
    "Qwen/Qwen3-VL-8B-Instruct": released_size(
        tied=False,
        text=dict(hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32),
        vision=dict(
            depth=27,
            hidden_size=1152,
            intermediate_size=4304,
            out_hidden_size=4096,
            deepstack_visual_indexes=[8, 16, 24],
        ),
    ),
}


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
