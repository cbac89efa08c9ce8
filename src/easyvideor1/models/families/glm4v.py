"""GLM-4.1V (``glm4v``, ``Glm4vForConditionalGeneration``): a Qwen2-VL-style vision tower with 2-D
RoPE and learned position embeddings (patch 14, factor 28), a GLM-4 decoder with 3-D RoPE, and
its own video rules:

- **frames** (``frame_rule="glm4v"``, transformers' ``Glm4vVideoProcessor``): ``fps`` frames per
  second (default 2) at ``ceil(i * source_fps / fps)``, at most ``max_duration`` (300) seconds'
  worth, else that many evenly over the video; repeated indices dropped; an odd count repeats the
  last frame. Frames are resized with the whole *video* (frames x height x width) between
  ``min_pixels`` (default 112 x 112) and ``total_pixels`` (default 28 x 28 x 2 x 30000).
- **prompt**: a video is ``<|begin_of_video|><|video|><|end_of_video|>`` in the chat template;
  the processor writes each temporal patch as ``<|begin_of_image|><|image|>...<|end_of_image|>``
  followed by its timestamp in whole seconds, so video tokens are ``<|image|>`` tokens told apart
  from images' only by ``mm_token_type_ids`` (2 inside a video's begin/end tokens).
- **chat format**: ``[gMASK]<sop><|user|>\\n...<|assistant|>\\n``; a turn ends at ``<|user|>``,
  ``<|observation|>`` or ``<|endoftext|>`` (the released generation config's stop tokens).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from .base import ModelFamily, tiny_decoder_fields
from .registry import register

# Glm4vVideoProcessor's defaults (transformers 5.19, and the released video_preprocessor_config)
GLM_FPS = 2.0
GLM_MAX_DURATION = 300
GLM_MIN_PIXELS = 112 * 112  # size.shortest_edge: the whole video's (t x h x w) lower bound
GLM_TOTAL_PIXELS = 28 * 28 * 2 * 30000  # size.longest_edge: the whole video's upper bound
GLM_MAX_RATIO = 200

GLM_VISION_TOKENS = (
    "<|image|>",
    "<|video|>",
    "<|begin_of_image|>",
    "<|end_of_image|>",
    "<|begin_of_video|>",
    "<|end_of_video|>",
)
GLM_SPECIAL_TOKENS = (
    "<|endoftext|>",
    "[MASK]",
    "[gMASK]",
    "[sMASK]",
    "<sop>",
    "<eop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    *GLM_VISION_TOKENS,
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
)

# GLM-4.1V's chat template (the released one's layout, written for the tiny tokenizer): media in
# message order, the assistant turn opened by "<|assistant|>\n".
_GLM_TEMPLATE = (
    "{% macro content(c) %}{% if c is string %}{{ c }}{% else %}{% for item in c %}"
    "{% if item['type'] == 'video' %}<|begin_of_video|><|video|><|end_of_video|>"
    "{% elif item['type'] == 'image' %}<|begin_of_image|><|image|><|end_of_image|>"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}{% endmacro %}"
    "[gMASK]<sop>{% for message in messages %}"
    "{% if message['role'] == 'system' %}<|system|>\n{{ content(message['content']) }}"
    "{% elif message['role'] == 'user' %}<|user|>\n{{ content(message['content']) }}"
    "{% elif message['role'] == 'assistant' %}<|assistant|>\n{{ content(message['content'] or '') }}"
    "{% elif message['role'] == 'tool' %}<|observation|>\n{{ content(message['content']) }}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def glm_smart_resize(
    nframes: int, height: int, width: int, factor: int, min_pixels: float, max_pixels: float
) -> tuple[int, int]:
    """GLM-4.1V's resize: sides on the ``factor`` grid, the whole video's pixels (frames rounded
    to pairs x height x width) within ``[min_pixels, max_pixels]``, aspect kept."""
    if min(height, width) <= 0:
        raise ValueError(f"frame size must be positive, got {height}x{width}")
    if height < factor or width < factor:  # GLM scales a too-small side up before rounding
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    if max(height, width) / min(height, width) > GLM_MAX_RATIO:
        raise ValueError(f"aspect ratio must be smaller than {GLM_MAX_RATIO}, got {height}x{width}")
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    t_bar = round(nframes / 2) * 2
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((nframes * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (nframes * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def glm_text_config(vocab_size: int, token_ids: dict[str, int], hidden: int, layers: int) -> dict[str, Any]:
    """Tiny GLM-4 decoder fields (GLM-4.1V's; GLM-4.5V adds its experts)."""
    fields = tiny_decoder_fields(vocab_size, hidden, layers)
    fields["head_dim"] = (
        hidden // fields["num_attention_heads"]
    )  # GLM's attention derives it so; vLLM reads it
    return dict(
        **fields,
        # as the released config: transformers always gives q/k/v a bias, vLLM only when told
        # (without it vLLM drops the biases: measured, log-probs 0.003-0.01 off once they move)
        attention_bias=True,
        # half of head dim 32 rotates (as GLM-4.1V's 64 of 128): 8 frequencies split t/h/w
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.5,
            "mrope_section": [2, 3, 3],
        },
        pad_token_id=token_ids["<|endoftext|>"],
    )


def glm_vision_config(hidden: int) -> dict[str, Any]:
    """A 2-block GLM vision tower (patch 14, 2x2 merge, frame pairs) feeding a ``hidden``-wide decoder."""
    return dict(
        depth=2,
        hidden_size=64,
        intermediate_size=128,
        num_heads=2,
        patch_size=14,
        spatial_merge_size=2,
        temporal_patch_size=2,
        out_hidden_size=hidden,
        image_size=112,
    )


def glm_token_fields(token_ids: dict[str, int]) -> dict[str, Any]:
    """Top-level placeholder-token ids of a GLM-4.1V/4.5V config."""
    return dict(
        image_token_id=token_ids["<|image|>"],
        video_token_id=token_ids["<|video|>"],
        image_start_token_id=token_ids["<|begin_of_image|>"],
        image_end_token_id=token_ids["<|end_of_image|>"],
        video_start_token_id=token_ids["<|begin_of_video|>"],
        video_end_token_id=token_ids["<|end_of_video|>"],
        tie_word_embeddings=False,
    )


class Glm4vFamily(ModelFamily):
    # --- frames: Glm4vVideoProcessor's rule --------------------------------------------------
    def sampling_defaults(self, params) -> dict[str, Any]:
        """The GLM rule's fields: ``fps`` (default 2) or ``nframes`` (evenly over the clip, as
        qwen-vl-utils: GLM's processor has no frame count), ``max_frames`` (default: 300 s worth),
        ``min_pixels`` / ``total_pixels`` bound the whole video (GLM's ``size``), ``max_pixels``
        (optional) caps each frame on top. ``min_frames`` is not a GLM setting and is refused."""
        d = asdict(params)
        if d["min_frames"] is not None:
            raise ValueError(
                "data.video_min_frames is a qwen-vl-utils setting; GLM-4.1V's frame rule has none "
                "(it samples data.video_fps frames per second, at least 2): unset it"
            )
        if d["nframes"] is None:
            d["fps"] = float(d["fps"] if d["fps"] is not None else GLM_FPS)
        d["min_pixels"] = d["min_pixels"] if d["min_pixels"] is not None else GLM_MIN_PIXELS
        d["total_pixels"] = d["total_pixels"] if d["total_pixels"] is not None else GLM_TOTAL_PIXELS
        if d["total_pixels"] < d["min_pixels"]:
            raise ValueError(
                f"total_pixels ({d['total_pixels']}) is below min_pixels ({d['min_pixels']}): GLM-4.1V "
                "bounds the whole video's pixels"
            )
        return d

    def frame_indices(self, params, total_frames: int, video_fps: float) -> tuple[list[int], float]:
        from ...media.sampling import frame_range, uniform_frame_indices

        if params.nframes is not None:
            return uniform_frame_indices(params.replace(rule="qwen"), total_frames, video_fps)
        first, last, window = frame_range(params, total_frames, video_fps)
        fps = self.sampling_defaults(params)["fps"]
        duration = window / video_fps
        max_frames = params.max_frames if params.max_frames is not None else int(GLM_MAX_DURATION * fps)
        if duration * fps <= max_frames and duration <= GLM_MAX_DURATION:
            n = max(math.floor(duration * fps), 1)
            picks = [min(last, first + math.ceil(i * video_fps / fps)) for i in range(n)]
        elif max_frames >= window:
            picks = list(range(first, last + 1))
        else:  # longer than the processor takes: that many frames evenly over the clip
            import numpy as np

            seconds = np.linspace(0, duration, max_frames, endpoint=True)
            picks = [min(last, first + math.ceil(t * video_fps)) for t in seconds]
        indices = list(dict.fromkeys(picks))  # drop repeats, keep order
        if len(indices) % 2:
            indices.append(indices[-1])
        return indices, len(indices) / max(duration, 1e-6)

    def frame_size(self, params, height: int, width: int, nframes: int) -> tuple[int, int]:
        d = self.sampling_defaults(params)
        budget = d["total_pixels"]
        if d["max_pixels"] is not None:  # a per-frame cap on top of GLM's per-video budget
            budget = min(budget, d["max_pixels"] * (round(nframes / 2) * 2))
        return glm_smart_resize(nframes, height, width, params.factor, d["min_pixels"], budget)

    # --- the model ----------------------------------------------------------------------------
    def prepare_model(self, model) -> None:
        """Tell video tokens from image tokens when a batch holds both.

        GLM-4.1V's transformers code (5.19) marks every ``<|image|>`` token as both an image and a
        video position, so a forward with images *and* videos fails ("Image features and image
        tokens do not match"). The processor's own rule, a token inside ``<|begin_of_video|>`` ...
        ``<|end_of_video|>`` is a video token, is applied here instead.
        """
        import torch

        inner = model.model
        if getattr(inner, "_easyvideor1_masks", False):
            return
        config = inner.config
        original = inner.get_placeholder_mask

        def get_placeholder_mask(input_ids, inputs_embeds, image_features=None, video_features=None):
            if input_ids is None:
                return original(input_ids, inputs_embeds, image_features, video_features)
            in_video = torch.cumsum(input_ids == config.video_start_token_id, dim=-1) > torch.cumsum(
                input_ids == config.video_end_token_id, dim=-1
            )
            tokens = input_ids == config.image_token_id
            image, video = tokens & ~in_video, tokens & in_video
            for mask, features, kind in ((image, image_features, "image"), (video, video_features, "video")):
                if features is not None and int(mask.sum()) * inputs_embeds.shape[-1] != features.numel():
                    raise ValueError(
                        f"{kind} features and {kind} tokens do not match: {int(mask.sum())} tokens, "
                        f"{features.shape[0]} features"
                    )
            expand = inputs_embeds.device
            return image.unsqueeze(-1).to(expand), video.unsqueeze(-1).to(expand)

        inner.get_placeholder_mask = get_placeholder_mask
        inner._easyvideor1_masks = True

    # --- the tiny offline model ---------------------------------------------------------------
    def tiny_chat_template(self) -> str:
        return _GLM_TEMPLATE

    def tiny_config(self, vocab_size, token_ids, hidden=128, layers=2):
        from transformers import Glm4vConfig

        return Glm4vConfig(
            text_config=glm_text_config(vocab_size, token_ids, hidden, layers),
            vision_config=glm_vision_config(hidden),
            **glm_token_fields(token_ids),
        )

    def tiny_processor_parts(self) -> dict[str, Any]:
        from transformers import Glm4vImageProcessor, Glm4vVideoProcessor

        sizes = dict(patch_size=14, merge_size=2, temporal_patch_size=2)
        return {
            "image_processor": Glm4vImageProcessor(**sizes),
            "video_processor": Glm4vVideoProcessor(**sizes),
        }


# what GLM-4.1V and GLM-4.5V share (keyword arguments of ModelFamily)
GLM4V_FACTS = dict(
    patch_size=14,
    processor_class="Glm4vProcessor",
    video_processor_class="Glm4vVideoProcessor",
    image_processor_class="Glm4vImageProcessor",
    special_tokens=GLM_SPECIAL_TOKENS,
    placeholder_tokens=GLM_VISION_TOKENS,
    eos_tokens=("<|endoftext|>", "<|user|>", "<|observation|>"),
    frame_rule="glm4v",
    # GLM-4.5V's XML call format is not read yet
    no_tools="GLM-4.1V's chat template has no tool-call format",
    vllm_max_videos=1,  # vLLM 0.32's GLM-4.1V/4.5V: "At most 1 video(s) may be provided in one prompt"
)

FAMILY = register(
    Glm4vFamily(
        model_type="glm4v",
        aliases=("glm4.1v", "glm41v", "glm-4.1v"),
        vllm_architecture="Glm4vForConditionalGeneration",
        **GLM4V_FACTS,
    )
)
