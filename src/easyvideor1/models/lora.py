"""LoRA on the policy (``model.lora``), with ``peft``.

``attach_lora`` wraps a loaded model with ``peft.get_peft_model`` and returns the *same* transformers
model, now carrying adapter layers in place of its target linear layers. Everything else in the
package (family adapters, FSDP2 shard units, ``generate``, packing, the vision cache) keeps working
on that model unchanged; the peft wrapper rides along (:func:`peft_of`) for what only it does:
disabling the adapter and writing PEFT-format adapter directories.

- Base weights are frozen by peft; only ``lora_A``/``lora_B`` train, so the optimizer, gradients and
  the resumable checkpoint state hold the adapters alone.
- The KL reference is the base model: the same weights with the adapter disabled
  (:func:`reference_forward`), never a second copy. After the SFT warm-up the reference is the
  warmed-up policy instead (as without LoRA): a snapshot of the adapter tensors (a few MB) is
  swapped in for the reference forward and swapped back after, so the reference is still the one
  model plus adapter-sized tensors, and the policy's adapter stays a single PEFT adapter on the
  original base model (``PeftModel.from_pretrained(base, ckpt/adapter)`` gives the policy).
"""

from __future__ import annotations

import copy
import os
from contextlib import contextmanager
from typing import Any

import torch

from ..errors import ConfigError
from .released import write_released_layout

_PEFT_ATTR = "_easyvideor1_peft"  # the peft wrapper, kept beside the model (not a submodule)
# linear layers that are never adapted by default: MoE routers (their argmax picks experts)
_ROUTERS = ("gate", "shared_expert_gate")


def _linear_names(model: torch.nn.Module) -> list[str]:
    return [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)]


def _vision_prefix(model: torch.nn.Module) -> tuple[str, ...] | None:
    """The module-name prefixes of the vision side (``model.visual.``; InternVL's tower and its
    projector), or None without one: what ``freeze_vision_tower`` freezes, as the adapter says."""
    from .families import family_of_model

    try:
        modules = family_of_model(model).vision.modules(model)
    except (TypeError, KeyError, ValueError, AttributeError):
        return None
    ids = {id(m) for m in modules}
    prefixes = tuple(name + "." for name, module in model.named_modules() if id(module) in ids)
    return prefixes or None


def default_targets(model: torch.nn.Module, vision: bool = False) -> list[str]:
    """Every linear layer of the language model (attention, MLP and linear-attention projections),
    without ``lm_head`` and MoE routers; with ``vision``, the vision tower's linear layers too."""
    out_emb = model.get_output_embeddings()
    skip = {n for n, m in model.named_modules() if m is out_emb}
    tower = _vision_prefix(model)
    names = []
    for name in _linear_names(model):
        if name in skip or name.rsplit(".", 1)[-1] in _ROUTERS:
            continue
        if tower and name.startswith(tower) and not vision:
            continue
        names.append(name)
    return names


def matches_target(name: str, entry: str) -> bool:
    """PEFT's list matching: the module's name is the entry, or ends with ``.<entry>``."""
    return name == entry or name.endswith("." + entry)


def resolve_targets(model: torch.nn.Module, lora, freeze_vision_tower: bool = False) -> list[str]:
    """The full names of the linear layers ``model.lora`` adapts; errors name the bad entries."""
    if not lora.target_modules:
        names = default_targets(model, vision=lora.vision)
    else:
        linear = _linear_names(model)
        unmatched = [e for e in lora.target_modules if not any(matches_target(n, e) for n in linear)]
        if unmatched:
            leaves = sorted({n.rsplit(".", 1)[-1] for n in linear})
            raise ConfigError(
                f"model.lora.target_modules: {unmatched} match no linear layer of "
                f"{type(model).__name__} (linear layer names end in: {', '.join(leaves)})"
            )
        names = [n for n in linear if any(matches_target(n, e) for e in lora.target_modules)]
    tower = _vision_prefix(model)
    in_tower = [n for n in names if tower and n.startswith(tower)]
    if in_tower and freeze_vision_tower:
        raise ConfigError(
            f"model.lora.target_modules adapts vision-tower layers (e.g. {in_tower[0]}) but "
            "model.freeze_vision_tower=true: drop them or unfreeze the tower"
        )
    if not names:
        raise ConfigError(f"model.lora: {type(model).__name__} has no linear layer to adapt")
    return names


def attach_lora(model: torch.nn.Module, lora, freeze_vision_tower: bool = False) -> torch.nn.Module:
    """Put ``model.lora``'s adapters into ``model`` (in place) and freeze every base weight.

    Returns ``model`` itself; :func:`peft_of` gives its peft wrapper."""
    from peft import LoraConfig, get_peft_model

    targets = resolve_targets(model, lora, freeze_vision_tower)
    config = LoraConfig(
        r=lora.rank,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=targets,
        bias="none",
    )
    # adapters in the model's dtype (peft would upcast them to fp32 next to a bf16 base): FSDP2
    # shard units need one parameter dtype, and model.dtype is the training dtype, as without LoRA
    wrapper = get_peft_model(model, config, autocast_adapter_dtype=False)
    inner = wrapper.get_base_model()
    assert inner is model  # peft injects the adapters in place
    object.__setattr__(model, _PEFT_ATTR, wrapper)  # not registered: no module cycle, no state
    return model


def peft_of(model: torch.nn.Module):
    """The peft wrapper of a model :func:`attach_lora` adapted, else None."""
    return model.__dict__.get(_PEFT_ATTR) if model is not None else None


def is_lora(model: torch.nn.Module) -> bool:
    return peft_of(model) is not None


def parameter_counts(model: torch.nn.Module) -> tuple[int, int]:
    """(trainable, total) parameter counts (global sizes, also under FSDP2)."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, sum(p.numel() for p in model.parameters())


def adapter_parameters(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """The adapter parameters by name (what trains under LoRA)."""
    return {n: p for n, p in model.named_parameters() if "lora_" in n}


def adapter_snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Detached copies of the adapter tensors (shards stay shards under FSDP2)."""
    with torch.no_grad():
        return {n: p.detach().clone() for n, p in adapter_parameters(model).items()}


def copy_adapter(model: torch.nn.Module, into: dict[str, torch.Tensor]) -> None:
    """Overwrite the snapshot ``into`` with the model's current adapter values."""
    with torch.no_grad():
        for n, p in adapter_parameters(model).items():
            into[n].copy_(p.detach())


@contextmanager
def reference_forward(model: torch.nn.Module, snapshot: dict[str, torch.Tensor] | None = None):
    """Inside, ``model`` computes the KL reference: its base weights (adapter disabled), or, given
    a ``snapshot`` (the warmed-up adapter), base plus that adapter. Grad-free; restored after."""
    if snapshot is None:
        with torch.no_grad(), peft_of(model).disable_adapter():
            yield model
        return
    params = adapter_parameters(model)
    with torch.no_grad():
        saved = {n: p.detach().clone() for n, p in params.items()}
        try:
            for n, p in params.items():
                p.copy_(snapshot[n])
            yield model
        finally:
            for n, p in params.items():
                p.copy_(saved[n])


def plain_copy(model: torch.nn.Module) -> torch.nn.Module:
    """A separate plain transformers model equal to ``model`` with its adapter merged (the rollout
    copy under FSDP: it knows nothing of LoRA and receives merged weights)."""
    wrapper = copy.deepcopy(peft_of(model))
    plain = wrapper.merge_and_unload()
    plain.__dict__.pop(_PEFT_ATTR, None)
    return plain


def save_adapter(model: torch.nn.Module, directory: str | os.PathLike, adapter_state: dict[str, Any]) -> None:
    """Write the adapter in PEFT's format (``adapter_config.json``, ``adapter_model.safetensors``).

    ``adapter_state``: the full (gathered) adapter tensors under the model's own names."""
    wrapper = peft_of(model)
    prefixed = {f"base_model.model.{k}": v for k, v in adapter_state.items() if "lora_" in k}
    wrapper.save_pretrained(str(directory), state_dict=prefixed)


def save_merged(
    model: torch.nn.Module, directory: str | os.PathLike, processor=None, is_main: bool = True
) -> None:
    """Write the adapter merged into the base weights as a plain Hugging Face model directory
    (a collective under FSDP2: every rank calls it; rank ``is_main`` writes)."""
    from .lora_merge import merged_state_dict

    merged = {}
    for name, tensor in merged_state_dict(model):
        if is_main:
            merged[name] = tensor.detach().to("cpu", copy=True)
    if not is_main:
        return
    base = peft_of(model).get_base_model() if is_lora(model) else model
    base.save_pretrained(str(directory), state_dict=merged)
    write_released_layout(directory)
    if processor is not None:
        processor.save_pretrained(str(directory))
