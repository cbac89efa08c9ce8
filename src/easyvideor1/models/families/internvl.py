"""InternVL3.5 (``InternVLForConditionalGeneration``): InternViT tower, pixel-shuffle MLP projector,
Qwen3 (or Qwen2) text model with plain 1-D RoPE.

How it differs from the Qwen-VL families, and what this adapter therefore answers differently:

- **One pixel tensor.** The processor returns a single ``pixel_values`` ``[rows, 3, S, S]`` holding
  image tiles and video frames in placeholder order across the batch, and no grid tensors. A
  prompt's share is its rows: the ``<IMG_CONTEXT>`` tokens it holds over ``image_seq_length``
  (every tile and every frame has exactly that many), see :meth:`pixel_rows`.
- **One tower call per forward** (images and frames go through ``get_image_features`` together),
  so a text-only forward needs one dummy pass, not two (:attr:`tower_calls`).
- **Frames**: a fixed number per video, picked uniformly with a half-step initial shift and each
  resized to the square tile size (448 for the release); the ``internvl`` frame rule below is the
  video processor's ``sample_frames`` + resize. A video renders as ``Frame{i}: <img>...</img>``
  lines; vLLM renders its frames with ``<video>`` ids in place of ``<IMG_CONTEXT>`` (both are
  placeholders the engine replaces, so only the prompt ids differ, never the features or positions).
- **Images** are tiled by the GotOcr2 image processor (``crop_to_patches``: up to ``max_patches``
  tiles plus a thumbnail); the processor does all of it, so images reach it as loaded (no resize).
- **Positions** are 1-D: packing restarts them per sequence (no ``get_rope_index``).
- The vision tower is ``model.model.vision_tower``; the projector ``model.model.multi_modal_projector``
  is frozen with it (Qwen's merger is inside its tower).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from .base import _TINY_TEMPLATE_BODY, QWEN_SPECIAL_TOKENS, ModelFamily, qwen_text_config
from .registry import register

if TYPE_CHECKING:
    import torch

# The release's tile (image and frame) size: the frame size when no checkpoint says otherwise
RELEASE_SIDE = 448
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
_TINY_TEMPLATE_BODY_INTERNVL = _TINY_TEMPLATE_BODY.replace(
    "<|vision_start|><|image_pad|><|vision_end|>", "<IMG_CONTEXT>\n"
).replace("<|vision_start|><|video_pad|><|vision_end|>", "<video>\n")
# the tiny model's tiles: 56 px, patch 14 -> 4x4 patches -> 2x2 = 4 tokens after pixel shuffle
TINY_SIDE = 56


def tokens_per_tile(side: int, patch_size: int, downsample_ratio: float = 0.5) -> int:
    """``image_seq_length``: tokens one tile or frame becomes after the pixel shuffle."""
    return int((side // patch_size) ** 2 * downsample_ratio**2)


def checkpoint_side(model_path: str) -> int:
    """The square tile size of the checkpoint at ``model_path`` (``vision_config.image_size``)."""
    import json
    import os

    with open(os.path.join(model_path, "config.json"), encoding="utf-8") as f:
        size = (json.load(f).get("vision_config") or {}).get("image_size", RELEASE_SIDE)
    h, w = (size, size) if isinstance(size, int) else size
    if h != w:
        raise ValueError(f"{model_path}: InternVL tiles of {h}x{w} are not square (vision_config.image_size)")
    return int(h)


def _fixed_count(params) -> None:
    if params.nframes is None:
        raise ValueError(
            "InternVL samples a fixed number of frames per video (its processor stacks every "
            "video of a batch): set data.video_nframes (and data.video_fps=null)"
        )


class InternVLFamily(ModelFamily):
    # --- frames: the InternVL video processor's rule ---------------------------------------------
    def frame_side(self, params) -> int:
        """The square frame side of the ``internvl`` rule: the largest multiple of the factor (patch
        x pixel-shuffle 2) whose square fits ``max_pixels`` (default the release's 448 x 448). It
        must equal the checkpoint's tile size (``vision_config.image_size``, the processor's
        ``size``): :meth:`fit_data_config` fills it in from there or refuses another."""
        budget = params.max_pixels if params.max_pixels is not None else RELEASE_SIDE**2
        side = (math.isqrt(int(budget)) // self.factor) * self.factor
        if side < self.factor:
            raise ValueError(
                f"data.video_max_pixels ({params.max_pixels}) is below one {self.factor}x{self.factor} "
                f"InternVL tile: set it to the model's tile size squared (the release: {RELEASE_SIDE}^2)"
            )
        return side

    def frame_indices(self, params, total_frames: int, video_fps: float) -> tuple[list[int], float]:
        """``InternVLVideoProcessor.sample_frames`` (``initial_shift=True``) over the clip window:
        ``nframes`` frames, one per equal slice of the window, each from the middle of its slice
        (``int(shift + k * step)``, float32 arithmetic as the processor's ``torch.arange``)."""
        import torch

        from ...media.sampling import frame_range

        _fixed_count(params)
        first, _, window = frame_range(params, total_frames, video_fps)
        n = int(params.nframes)
        if n > window:
            raise ValueError(f"cannot sample {n} frames from a window of {window} frames")
        step = window / n
        idx = torch.arange(step / 2, window, step).int().tolist()
        return [first + i for i in idx], len(idx) / window * video_fps

    def frame_size(self, params, height: int, width: int, nframes: int) -> tuple[int, int]:
        """Every frame becomes one square tile (the processor's ``size``), aspect not kept."""
        if min(height, width) <= 0:
            raise ValueError(f"frame size must be positive, got {height}x{width}")
        side = self.frame_side(params)
        return side, side

    def sampling_defaults(self, params) -> dict[str, Any]:
        _fixed_count(params)  # refused when the settings are read, not at the first video
        d = asdict(params)
        d["max_pixels"] = self.frame_side(params) ** 2  # what the frames are (cache keys)
        return d

    def fit_data_config(self, cfg, model_path: str):
        """The checkpoint's tile size decides the frame size: ``data.video_max_pixels`` becomes its
        square when unset, and a value giving another frame size is refused by name."""
        from dataclasses import replace

        side = checkpoint_side(model_path)
        if cfg.video_max_pixels is None:
            return replace(cfg, video_max_pixels=side * side)
        got = self.frame_side(cfg.sampling_params())
        if got != side:
            raise ValueError(
                f"data.video_max_pixels={cfg.video_max_pixels} gives {got}x{got} InternVL frames but the "
                f"model at {model_path} takes {side}x{side} tiles: set it to {side * side} or leave it "
                "unset (the model decides)"
            )
        return cfg

    # --- the model -------------------------------------------------------------------------------
    def vision_tower(self, model: torch.nn.Module) -> torch.nn.Module:
        inner = getattr(model, "model", model)
        tower = getattr(inner, "vision_tower", None)
        if tower is None:
            raise TypeError(f"{type(model).__name__} (internvl) has no vision tower at .model.vision_tower")
        return tower

    def vision_modules(self, model: torch.nn.Module) -> list[torch.nn.Module]:
        # the projector maps tower features to the text model, as Qwen's merger inside its tower
        return [self.vision_tower(model), getattr(model, "model", model).multi_modal_projector]

    # --- the processor's layout ------------------------------------------------------------------
    # one get_image_features call per forward takes tiles and frames alike
    tower_calls = {"image": "pixel_values"}

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

    def dummy_vision_output(self, model: torch.nn.Module) -> torch.Tensor:
        """The sum of the features of one zero tile (tower + projector), for the dummy pass."""
        import torch

        inner = getattr(model, "model", model)
        size = inner.config.vision_config.image_size
        h, w = (size, size) if isinstance(size, int) else size
        p = next(self.vision_tower(model).parameters())
        out = inner.get_image_features(
            pixel_values=torch.zeros(1, 3, h, w, dtype=p.dtype, device=p.device), return_dict=True
        )
        return out.pooler_output.sum()

    # --- the tiny offline model ------------------------------------------------------------------
    def tiny_chat_template(self) -> str:
        return _TINY_TEMPLATE_BODY_INTERNVL + self.tiny_generation_prompt() + "{% endif %}"

    def tokenizer_fields(self) -> dict[str, Any]:
        # the InternVL processor reads its tokens as tokenizer attributes (tokenizer_config.json
        # "extra_special_tokens", as the released tokenizers carry them)
        return {"extra_special_tokens": dict(NAMED_TOKENS)}

    def tiny_config(self, vocab_size, token_ids, hidden=128, layers=2):
        from transformers import InternVLConfig

        text = qwen_text_config(vocab_size, token_ids, hidden, layers)
        text.update(model_type="qwen3", rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
        vision = dict(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=TINY_SIDE,
            patch_size=self.patch_size,
            norm_type="layer_norm",  # InternVL3.5's InternViT-300M
            use_mean_pooling=False,
        )
        return InternVLConfig(
            text_config=text,
            vision_config=vision,
            image_token_id=token_ids["<IMG_CONTEXT>"],
            image_seq_length=tokens_per_tile(TINY_SIDE, self.patch_size),
            downsample_ratio=0.5,
            tie_word_embeddings=False,
        )

    def tiny_processor_parts(self) -> dict[str, Any]:
        import transformers

        size = {"height": TINY_SIDE, "width": TINY_SIDE}
        return {
            "image_processor": transformers.GotOcr2ImageProcessor(
                size=size, crop_to_patches=True, min_patches=1, max_patches=4
            ),
            "video_processor": transformers.InternVLVideoProcessor(size=size),
            "image_seq_length": tokens_per_tile(TINY_SIDE, self.patch_size),
        }


FAMILY = register(
    InternVLFamily(
        model_type="internvl",
        aliases=("internvl3_5", "internvl3.5", "internvl35", "internvl3"),
        patch_size=14,
        processor_class="InternVLProcessor",
        video_processor_class="InternVLVideoProcessor",
        image_processor_class="GotOcr2ImageProcessor",
        # vLLM serves the transformers-format checkpoint with its InternS1 implementation
        vllm_architecture="InternVLForConditionalGeneration",
        temporal_patch_size=1,
        mrope=False,
        resize_images=False,
        frame_rule="internvl",
        no_tools="its processor gives no grid tensors to place the tool turns' media by",
        # the demo's 32x32 frame budget is a Qwen-VL one: the tiny model's 56x56 tiles decide
        demo_overrides=("data.video_min_pixels=null", "data.video_max_pixels=null"),
        placeholder_tokens=INTERNVL_VISION_TOKENS,
        special_tokens=INTERNVL_SPECIAL_TOKENS,
    )
)
