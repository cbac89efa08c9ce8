"""Qwen2-VL: patch 14 (factor 28), full attention in the vision tower, M-RoPE."""

from __future__ import annotations

from .base import EngineFacts, Frames, ModelFamily, TinyFixture, VisionLayout
from .registry import register
from .tiny_configs import TINY_MROPE, tiny_qwen_config, tiny_vision_config

# the frame grid Qwen2-VL and Qwen2.5-VL share
QWEN2_FRAMES = Frames(patch_size=14)


def qwen2_vision(processor_class: str) -> VisionLayout:
    """A Qwen2/2.5-VL processor of class ``processor_class`` around Qwen2-VL's video processor."""
    return VisionLayout(
        processor_class=processor_class,
        video_processor_class="Qwen2VLVideoProcessor",
        cap_pixels_per_frame=True,
    )


def tiny_config(vocab_size, token_ids, hidden=128, layers=2):
    # Qwen2-VL's vision hidden_size is the merger's output (the LM width)
    vision = tiny_vision_config(14, embed_dim=64, hidden_size=hidden, mlp_ratio=2)
    return tiny_qwen_config(
        "Qwen2VLConfig", vocab_size, token_ids, hidden, layers, vision, rope_parameters=dict(TINY_MROPE)
    )


FAMILY = register(
    ModelFamily(
        model_type="qwen2_vl",
        aliases=("qwen2vl",),
        frames=QWEN2_FRAMES,
        vision=qwen2_vision("Qwen2VLProcessor"),
        engine=EngineFacts("Qwen2VLForConditionalGeneration"),
        fixture=TinyFixture(tiny_config),
    )
)
