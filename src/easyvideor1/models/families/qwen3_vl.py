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


FAMILY = register(
    ModelFamily(
        model_type="qwen3_vl",
        aliases=("qwen3vl",),
        frames=QWEN3_FRAMES,
        vision=QWEN3_VISION,
        engine=EngineFacts("Qwen3VLForConditionalGeneration"),
        fixture=TinyFixture(tiny_config),
    )
)
