"""GLM-4.5V (``glm4v_moe``, ``Glm4vMoeForConditionalGeneration``): GLM-4.1V's vision tower,
processor, frame rule and chat layout around a mixture-of-experts GLM-4.5 decoder (routed +
shared experts, the first layers dense). Every part but the decoder's is GLM-4.1V's.

GLM-4.5V's released template adds a thinking switch and an XML tool-call format; the tiny model
keeps GLM-4.1V's template, and tools are refused as for GLM-4.1V until that format is read.
"""

from __future__ import annotations

from .base import moe_family
from .glm4v import FAMILY as GLM4V
from .glm4v import GLM_TOKEN_ID_FIELDS, glm_text_config, glm_vision_config
from .registry import register
from .tiny_configs import token_id_fields


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
        text_config=text,
        vision_config=glm_vision_config(hidden),
        **token_id_fields(GLM_TOKEN_ID_FIELDS, token_ids),
    )


# its one-video vLLM limit is GLM-4.1V's too
FAMILY = register(
    moe_family(
        GLM4V, "glm4v_moe", ("glm4.5v", "glm45v", "glm-4.5v"), "Glm4vMoeForConditionalGeneration", tiny_config
    )
)
