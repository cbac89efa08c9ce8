"""GLM-4.1V (``glm4v``, ``Glm4vForConditionalGeneration``): a Qwen2-VL-style vision tower with 2-D
RoPE and learned position embeddings (patch 14, factor 28), a GLM-4 decoder with 3-D RoPE, and
its own video rules:

- **frames**: the ``glm4v`` frame rule (``media/frame_rules.py``, transformers'
  ``Glm4vVideoProcessor``): ``fps`` frames per second at most 300 seconds' worth, the whole
  *video*'s pixels (frames x height x width) bounded, not each frame's.
- **prompt**: a video is ``<|begin_of_video|><|video|><|end_of_video|>`` in the chat template;
  the processor writes each temporal patch as ``<|begin_of_image|><|image|>...<|end_of_image|>``
  followed by its timestamp in whole seconds, so video tokens are ``<|image|>`` tokens told apart
  from images' only by ``mm_token_type_ids`` (2 inside a video's begin/end tokens).
- **chat format**: ``[gMASK]<sop><|user|>\\n...<|assistant|>\\n``; a turn ends at ``<|user|>``,
  ``<|observation|>`` or ``<|endoftext|>`` (the released generation config's stop tokens).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .base import ChatTokens, EngineFacts, Frames, ModelFamily, TinyFixture, VisionLayout
from .registry import register
from .tiny_configs import tiny_decoder_fields, token_id_fields

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
# message order (up to the assistant turn's opening, "<|assistant|>\n").
GLM_TEMPLATE_BODY = (
    "{% macro content(c) %}{% if c is string %}{{ c }}{% else %}{% for item in c %}"
    "{% if item['type'] == 'video' %}<|begin_of_video|><|video|><|end_of_video|>"
    "{% elif item['type'] == 'image' %}<|begin_of_image|><|image|><|end_of_image|>"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}{% endfor %}{% endif %}{% endmacro %}"
    "[gMASK]<sop>{% for message in messages %}"
    "{% if message['role'] == 'system' %}<|system|>\n{{ content(message['content']) }}"
    "{% elif message['role'] == 'user' %}<|user|>\n{{ content(message['content']) }}"
    "{% elif message['role'] == 'assistant' %}<|assistant|>\n{{ content(message['content'] or '') }}"
    "{% elif message['role'] == 'tool' %}<|observation|>\n{{ content(message['content']) }}"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}"
)


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


# the top-level config fields of a GLM-4.1V/4.5V config that hold placeholder-token ids, by token
GLM_TOKEN_ID_FIELDS = {
    "image_token_id": "<|image|>",
    "video_token_id": "<|video|>",
    "image_start_token_id": "<|begin_of_image|>",
    "image_end_token_id": "<|end_of_image|>",
    "video_start_token_id": "<|begin_of_video|>",
    "video_end_token_id": "<|end_of_video|>",
}


@dataclass(frozen=True)
class Glm4vVision(VisionLayout):
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


def tiny_config(vocab_size, token_ids, hidden=128, layers=2):
    from transformers import Glm4vConfig

    return Glm4vConfig(
        text_config=glm_text_config(vocab_size, token_ids, hidden, layers),
        vision_config=glm_vision_config(hidden),
        **token_id_fields(GLM_TOKEN_ID_FIELDS, token_ids),
    )


FAMILY = register(
    ModelFamily(
        model_type="glm4v",
        aliases=("glm4.1v", "glm41v", "glm-4.1v"),
        frames=Frames(patch_size=14, rule="glm4v"),
        tokens=ChatTokens(
            special_tokens=GLM_SPECIAL_TOKENS,
            placeholder_tokens=GLM_VISION_TOKENS,
            eos_tokens=("<|endoftext|>", "<|user|>", "<|observation|>"),
            # GLM-4.5V's XML call format is not read yet
            no_tools="GLM-4.1V's chat template has no tool-call format",
            template_body=GLM_TEMPLATE_BODY,
            assistant_prompt="<|assistant|>\n",
        ),
        vision=Glm4vVision(
            processor_class="Glm4vProcessor",
            video_processor_class="Glm4vVideoProcessor",
            image_processor_class="Glm4vImageProcessor",
        ),
        # vLLM 0.32's GLM-4.1V/4.5V: "At most 1 video(s) may be provided in one prompt"
        engine=EngineFacts("Glm4vForConditionalGeneration", vllm_max_videos=1),
        fixture=TinyFixture(tiny_config),
    )
)
