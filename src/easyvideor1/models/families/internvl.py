"""InternVL3.5 (``InternVLForConditionalGeneration``): InternViT tower, pixel-shuffle MLP projector,
Qwen3 (or Qwen2) text model with plain 1-D RoPE.

How it differs from the Qwen-VL families, and what its parts therefore answer differently:

- **One pixel tensor.** The processor returns a single ``pixel_values`` ``[rows, 3, S, S]`` holding
  image tiles and video frames in placeholder order across the batch, and no grid tensors. A
  prompt's share is its rows: the ``<IMG_CONTEXT>`` tokens it holds over ``image_seq_length``
  (every tile and every frame has exactly that many), see ``InternVLVision.pixel_rows``.
- **One tower call per forward** (images and frames go through ``get_image_features`` together),
  so a text-only forward needs one dummy pass, not two (``InternVLVision.tower_calls``).
- **Frames**: a fixed number per video, picked uniformly with a half-step initial shift and each
  resized to the square tile size (448 for the release): the ``internvl`` frame rule
  (``media/frame_rules.py``), the video processor's ``sample_frames`` + resize; the checkpoint's
  tile size decides the frame size (``InternVLFrames.fit_data_config``). A video renders as ``Frame{i}: <img>...</img>``
  lines; vLLM renders its frames with ``<video>`` ids in place of ``<IMG_CONTEXT>`` (both are
  placeholders the engine replaces, so only the prompt ids differ, never the features or positions).
- **Images** are tiled by the GotOcr2 image processor (``crop_to_patches``: up to ``max_patches``
  tiles plus a thumbnail); the processor does all of it, so images reach it as loaded (no resize).
- **Positions** are 1-D: packing restarts them per sequence (no ``get_rope_index``).
- The vision tower is ``model.model.vision_tower``; the projector ``model.model.multi_modal_projector``
  is frozen with it (Qwen's merger is inside its tower).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError, UserError
from ...media.frame_rules import INTERNVL_RELEASE_SIDE, frame_rule
from .base import (
    QWEN_SPECIAL_TOKENS,
    TINY_TEMPLATE_BODY,
    ChatTokens,
    EngineFacts,
    Frames,
    ModelFamily,
    TinyFixture,
    VisionLayout,
)
from .registry import register
from .tiny_configs import qwen_text_config

if TYPE_CHECKING:
    import torch
# the InternVL tokens, by the names the transformers InternVLProcessor reads off the tokenizer
NAMED_TOKENS = {
    "context_image_token": "<IMG_CONTEXT>",
    "start_image_token": "<img>",
    "end_image_token": "</img>",
    "video_token": "<video>",
}
INTERNVL_VISION_TOKENS = tuple(NAMED_TOKENS.values())
# the tiny tokenizer: the Qwen chat tokens (InternVL3.5's text model is Qwen3) plus InternVL's own
INTERNVL_SPECIAL_TOKENS = (*QWEN_SPECIAL_TOKENS, *INTERNVL_VISION_TOKENS)
# InternVL3.5's template puts one placeholder per medium on its own line; the processor expands them
TINY_TEMPLATE_BODY_INTERNVL = TINY_TEMPLATE_BODY.replace(
    "<|vision_start|><|image_pad|><|vision_end|>", "<IMG_CONTEXT>\n"
).replace("<|vision_start|><|video_pad|><|vision_end|>", "<video>\n")
# the tiny model's tiles: 56 px, patch 14 -> 4x4 patches -> 2x2 = 4 tokens after pixel shuffle
TINY_SIDE = 56
PATCH_SIZE = 14


def tokens_per_tile(side: int, patch_size: int, downsample_ratio: float = 0.5) -> int:
    """``image_seq_length``: tokens one tile or frame becomes after the pixel shuffle."""
    return int((side // patch_size) ** 2 * downsample_ratio**2)


def checkpoint_side(model_path: str) -> int:
    """The square tile size of the checkpoint at ``model_path`` (``vision_config.image_size``)."""
    import json
    import os

    with open(os.path.join(model_path, "config.json"), encoding="utf-8") as f:
        size = (json.load(f).get("vision_config") or {}).get("image_size", INTERNVL_RELEASE_SIDE)
    h, w = (size, size) if isinstance(size, int) else size
    if h != w:
        raise UserError(f"{model_path}: InternVL tiles of {h}x{w} are not square (vision_config.image_size)")
    return int(h)


@dataclass(frozen=True)
class InternVLFrames(Frames):
    def fit_data_config(self, cfg, model_path: str):
        """The checkpoint's tile size decides the frame size: ``data.video_max_pixels`` becomes its
        square when unset, and a value giving another frame size is refused by name."""
        side = checkpoint_side(model_path)
        if cfg.video_max_pixels is None:
            return replace(cfg, video_max_pixels=side * side)
        got = frame_rule(self.rule).frame_side(cfg.sampling_params())
        if got != side:
            raise ConfigError(
                f"data.video_max_pixels={cfg.video_max_pixels} gives {got}x{got} InternVL frames but the "
                f"model at {model_path} takes {side}x{side} tiles: set it to {side * side} or leave it "
                "unset (the model decides)"
            )
        return cfg


@dataclass(frozen=True)
class InternVLVision(VisionLayout):
    # one get_image_features call per forward takes tiles and frames alike
    tower_calls = {"image": "pixel_values"}

    def modules(self, model: torch.nn.Module) -> list[torch.nn.Module]:
        # the projector maps tower features to the text model, as Qwen's merger inside its tower
        return [self.tower(model), getattr(model, "model", model).multi_modal_projector]

    def pixel_rows(self, processor, inputs: dict[str, Any]) -> dict[str, list[int]]:
        """Rows of ``pixel_values`` each prompt row owns, in order: its ``<IMG_CONTEXT>`` tokens
        over ``image_seq_length`` (one tile or frame each)."""
        ids = inputs["input_ids"]
        per_tile = int(processor.image_seq_length)
        counts = (ids == int(processor.image_token_id)).sum(dim=1).tolist()
        bad = [c for c in counts if c % per_tile]
        if bad:
            raise ValueError(
                f"internvl: a prompt holds {bad[0]} <IMG_CONTEXT> tokens, not a multiple of the "
                f"processor's image_seq_length {per_tile}"
            )
        return {"pixel_values": [c // per_tile for c in counts]}

    def dummy_output(self, model: torch.nn.Module) -> torch.Tensor:
        """The sum of the features of one zero tile (tower + projector), for the dummy pass."""
        import torch

        inner = getattr(model, "model", model)
        size = inner.config.vision_config.image_size
        h, w = (size, size) if isinstance(size, int) else size
        p = next(self.tower(model).parameters())
        out = inner.get_image_features(
            pixel_values=torch.zeros(1, 3, h, w, dtype=p.dtype, device=p.device), return_dict=True
        )
        return out.pooler_output.sum()


def tiny_config(vocab_size, token_ids, hidden=128, layers=2):
    from transformers import InternVLConfig

    text = qwen_text_config(vocab_size, token_ids, hidden, layers)
    text.update(model_type="qwen3", rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    vision = dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=TINY_SIDE,
        patch_size=PATCH_SIZE,
        norm_type="layer_norm",  # InternVL3.5's InternViT-300M
        use_mean_pooling=False,
    )
    return InternVLConfig(
        text_config=text,
        vision_config=vision,
        image_token_id=token_ids["<IMG_CONTEXT>"],
        image_seq_length=tokens_per_tile(TINY_SIDE, PATCH_SIZE),
        downsample_ratio=0.5,
        tie_word_embeddings=False,
    )


def tiny_processor_parts() -> dict[str, Any]:
    import transformers

    size = {"height": TINY_SIDE, "width": TINY_SIDE}
    return {
        "image_processor": transformers.GotOcr2ImageProcessor(
            size=size, crop_to_patches=True, min_patches=1, max_patches=4
        ),
        "video_processor": transformers.InternVLVideoProcessor(size=size),
        "image_seq_length": tokens_per_tile(TINY_SIDE, PATCH_SIZE),
    }


FAMILY = register(
    ModelFamily(
        model_type="internvl",
        aliases=("internvl3_5", "internvl3.5", "internvl35", "internvl3"),
        frames=InternVLFrames(patch_size=PATCH_SIZE, rule="internvl", temporal_patch_size=1),
        tokens=ChatTokens(
            special_tokens=INTERNVL_SPECIAL_TOKENS,
            placeholder_tokens=INTERNVL_VISION_TOKENS,
            no_tools="its processor gives no grid tensors to place the tool turns' media by",
            # the InternVL processor reads its tokens as tokenizer attributes
            named_tokens=tuple(NAMED_TOKENS.items()),
            template_body=TINY_TEMPLATE_BODY_INTERNVL,
        ),
        vision=InternVLVision(
            processor_class="InternVLProcessor",
            video_processor_class="InternVLVideoProcessor",
            image_processor_class="GotOcr2ImageProcessor",
            resize_images=False,
            tower_attribute="vision_tower",
        ),
        # vLLM serves the transformers-format checkpoint with its InternS1 implementation
        engine=EngineFacts("InternVLForConditionalGeneration", mrope=False),
        fixture=TinyFixture(
            tiny_config,
            processor_parts=tiny_processor_parts,
            # the demo's 32x32 frame budget is a Qwen-VL one: the tiny model's 56x56 tiles decide
            demo_overrides=("data.video_min_pixels=null", "data.video_max_pixels=null"),
        ),
    )
)
