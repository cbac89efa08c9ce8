"""Qwen3-VL-MoE: Qwen3-VL with mixture-of-experts feed-forward layers in the language model."""

from __future__ import annotations

from .base import QWEN3_VISION, VLLM_MOE_RELOAD, ModelFamily, qwen3_vision_config, tiny_qwen_config
from .qwen3_vl import _TINY_MROPE
from .registry import register


class Qwen3VLMoeFamily(ModelFamily):
    def tiny_config(self, vocab_size, token_ids, hidden=128, layers=2):
        return tiny_qwen_config(
            "Qwen3VLMoeConfig",
            vocab_size,
            token_ids,
            hidden,
            layers,
            qwen3_vision_config(hidden),
            rope_parameters=dict(_TINY_MROPE),
            num_experts=4,
            num_experts_per_tok=2,
            # 96, not 128: the released layout of the fused experts is the transpose of transformers'
            # (it tells them apart by shape), so no expert matrix may be square
            moe_intermediate_size=hidden * 3 // 4,
            decoder_sparse_step=1,
            # as the released config; transformers always renormalises the top-k weights, vLLM
            # reads this key (and fails to start without it)
            norm_topk_prob=True,
        )


FAMILY = register(
    Qwen3VLMoeFamily(
        model_type="qwen3_vl_moe",
        aliases=("qwen3vlmoe", "qwen3vl_moe"),
        vllm_architecture="Qwen3VLMoeForConditionalGeneration",
        **QWEN3_VISION,
        moe=True,
        # released Qwen3-VL-MoE checkpoints (and vLLM) hold the fused experts as [E, H, 2I] and
        # [E, I, H]; transformers 5.19 keeps and writes [E, 2I, H] and [E, H, I]
        transposed_in_checkpoints=("mlp.experts.gate_up_proj", "mlp.experts.down_proj"),
        vllm_weight_push=VLLM_MOE_RELOAD,
    )
)
