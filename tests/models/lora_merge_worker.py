"""Run under ``torchrun``: merged weights of an FSDP2-sharded peft model, gathered on every rank.

Usage: ``torchrun --nproc-per-node 2 lora_merge_worker.py MODEL_DIR OUT.safetensors``. Every rank
builds the same LoRA-wrapped tiny model (:func:`build`), shards it with the trainer's
``shard_model`` (FSDP2 per decoder layer / vision block, then the root), consumes
``merged_state_dict`` to the end (a collective), and rank 0 writes what it got.
"""

from __future__ import annotations

import sys

import torch

LORA_TARGETS = ["q_proj", "v_proj", "gate_proj", "down_proj", "qkv", "embed_tokens"]


def build(model_dir: str, dtype: torch.dtype = torch.float32):
    """The tiny model wrapped with rank-4 LoRA on attention, MLP, vision ``qkv`` and the token
    embedding, with non-zero ``B`` factors (peft starts them at zero: the delta would vanish)."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    base = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=dtype)
    cfg = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.1, target_modules=LORA_TARGETS)
    torch.manual_seed(0)  # peft draws the A factors from the global generator
    model = get_peft_model(base, cfg)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name or "lora_embedding_B" in name:
                p.copy_(torch.randn(p.shape, generator=g).to(p.dtype) * 0.05)
    return model


def main(model_dir: str, out: str) -> None:
    from safetensors.torch import save_file

    from easyvideor1.models.lora_merge import merged_state_dict
    from easyvideor1.trainer.distributed import (
        DistributedConfig,
        init_distributed,
        shard_model,
        shutdown_distributed,
    )

    torch.set_num_threads(1)
    state = init_distributed(DistributedConfig(backend="gloo"))
    model = shard_model(build(model_dir), DistributedConfig(), state)
    sharded = sum(hasattr(p, "full_tensor") for p in model.parameters())
    merged = {k: v.clone() for k, v in merged_state_dict(model)}
    if state.is_main:
        assert sharded > 0, "nothing was sharded"
        save_file(merged, out)
    shutdown_distributed(model)


if __name__ == "__main__":
    main(*sys.argv[1:3])
