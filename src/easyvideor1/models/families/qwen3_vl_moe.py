"""Qwen3-VL-MoE: Qwen3-VL with mixture-of-experts feed-forward layers in the language model."""

from __future__ import annotations

from .base import moe_family
from .qwen3_vl import FAMILY as QWEN3_VL
from .qwen3_vl import LARGE_TOWER, released_size
from .qwen3_vl import tiny_config as qwen3_vl_tiny_config
from .registry import register


def tiny_config(vocab_size, token_ids, hidden=128, layers=2):
    return qwen3_vl_tiny_config(
        vocab_size,
        token_ids,
        hidden,
        layers,
        config_class="Qwen3VLMoeConfig",
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


# Qwen3-VL-30B-A3B: 48 layers of 128 experts of 768 wide (8 per token), 4 KV heads, the 8B's tower
_SIZE_30B = released_size(False, 2048, 6144, 48, 32, LARGE_TOWER)
_SIZE_30B["text_config"].update(
    num_key_value_heads=4, decoder_sparse_step=1, mlp_only_layers=[], norm_topk_prob=True
)
_SIZE_30B["text_config"].update(num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768)


FAMILY = register(
    moe_family(
        QWEN3_VL,
        "qwen3_vl_moe",
        ("qwen3vlmoe", "qwen3vl_moe"),
        "Qwen3VLMoeForConditionalGeneration",
        tiny_config,
        released={"Qwen/Qwen3-VL-30B-A3B-Instruct": _SIZE_30B},
        # released Qwen3-VL-MoE checkpoints (and vLLM) hold the fused experts as [E, H, 2I] and
        # [E, I, H]; transformers 5.19 keeps and writes [E, 2I, H] and [E, H, I]
        transposed_in_checkpoints=("mlp.experts.gate_up_proj", "mlp.experts.down_proj"),
    )
)
