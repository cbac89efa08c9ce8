"""GLM-4.5V (``glm4v_moe``, ``Glm4vMoeForConditionalGeneration``): GLM-4.1V's vision tower,
processor, frame rule and chat layout around a mixture-of-experts GLM-4.5 decoder (routed +
shared experts, the first layers dense). Every part but the decoder's is GLM-4.1V's.

GLM-4.5V's released template adds a thinking switch and an XML tool-call format; the tiny model
keeps GLM-4.1V's template, and tools are refused as for GLM-4.1V until that format is read.
"""

from __future__ import annotations

from .base import ModelFamily, TinyFixture, moe_engine
from .glm4v import GLM4V_PARTS, VLLM_MAX_VIDEOS, glm_text_config, glm_token_fields, glm_vision_config
from .registry import register


def tiny_config(vocab_size, token_ids, hidden=128, layers=2):
    from transformers import Glm4vMoeConfig

    text = glm_text_config(vocab_size, token_ids, hidden, max(layers, 2))
    text.update(
        # 4 routed experts (2 per token) and one shared, behind one dense first layer
        n_routed_experts=4,
        num_experts_per_tok=2,
        n_shared_experts=1,
        moe_intermediate_size=hidden // 2,
        first_k_dense_replace=1,
        # the released config's; vLLM reads it (transformers' GLM-4.5V has no q/k norm)
        use_qk_norm=False,
    )
    return Glm4vMoeConfig(
        text_config=text, vision_config=glm_vision_config(hidden), **glm_token_fields(token_ids)
    )


FAMILY = register(
    ModelFamily(
        model_type="glm4v_moe",
        aliases=("glm4.5v", "glm45v", "glm-4.5v"),
        engine=moe_engine("Glm4vMoeForConditionalGeneration", vllm_max_videos=VLLM_MAX_VIDEOS),
        fixture=TinyFixture(tiny_config),
        **GLM4V_PARTS,
    )
)
