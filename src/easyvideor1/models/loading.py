"""Load a policy (a Hugging Face checkpoint of a registered model family) and its processor."""

from __future__ import annotations

import importlib.util
import os

import torch

from ..errors import ConfigError, UserError

# dtype names the configs take (model.dtype, distributed.*_dtype, rollout.vllm.dtype, --dtype)
DTYPES = {
    "float32": torch.float32,
    "fp32": torch.float32,
    "bfloat16": torch.bfloat16,
    "bf16": torch.bfloat16,
    "float16": torch.float16,
    "fp16": torch.float16,
}


class MissingPackageError(ImportError, UserError):
    """An optional package a setting needs is not installed: an ``ImportError`` to callers, and
    to the command line a user error it reports in one line (with the install command)."""


def check_attention(name: str) -> None:
    """Refuse a ``model.attn_implementation`` this machine cannot run, in one line (the name itself
    is checked when the config is read, ``trainer/config.py``).

    Checked when a model loads, not when the config is read: a GPU recipe naming flash-attention
    still parses (and is checked) on a machine without the package."""
    if name == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
        raise MissingPackageError(
            "model.attn_implementation=flash_attention_2 needs the flash_attn package: "
            "pip install flash-attn --no-build-isolation (or set model.attn_implementation=sdpa)"
        )


def load_policy(
    path: str,
    dtype: str = "float32",
    gradient_checkpointing: bool = False,
    freeze_vision_tower: bool = False,
    lora=None,
    attn_implementation: str = "sdpa",
):
    """The model and processor at ``path``; with ``lora`` (a ``model.lora`` section whose rank is
    > 0) its adapters are attached and every base weight is frozen (``models/lora.py``).

    ``attn_implementation`` (``model.attn_implementation``) is given to ``from_pretrained``, which
    sets it on every sub-config: the language model's attention and the vision tower's alike. A
    deep copy (the KL reference, the trainer's rollout copies) keeps it."""
    from transformers import AutoModelForImageTextToText, AutoProcessor

    if not path or not os.path.isdir(path):
        raise FileNotFoundError(
            f"model.path {path!r} is not a model directory (build one: easyvideor1 make-tiny-model)"
        )
    if os.path.isdir(os.path.join(path, "adapter")) and not os.path.exists(os.path.join(path, "config.json")):
        raise FileNotFoundError(
            f"model.path {path!r} is a LoRA checkpoint (adapter/ only): use its merged/ directory "
            "(trainer.export_merged: true), or the base model with model.lora and trainer.resume"
        )
    if dtype not in DTYPES:
        raise ConfigError(f"model.dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    check_attention(attn_implementation)
    from .families import family_of_checkpoint

    family = family_of_checkpoint(path)  # a clear error for unsupported checkpoints, before loading
    model = AutoModelForImageTextToText.from_pretrained(
        path, dtype=DTYPES[dtype], attn_implementation=attn_implementation
    )
    processor = AutoProcessor.from_pretrained(path)
    family.vision.prepare_model(model)
    if gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if freeze_vision_tower:
        for module in family.vision.modules(model):
            for p in module.parameters():
                p.requires_grad_(False)
    if lora is not None and lora.rank > 0:
        from .lora import attach_lora

        attach_lora(model, lora, freeze_vision_tower)
    return model, processor
