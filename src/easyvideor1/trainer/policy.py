"""The models a run trains with: the policy, its KL reference and (under FSDP) a rollout copy.

``build_policy`` loads the checkpoint (with LoRA adapters when ``model.lora.rank`` > 0), makes the
copies that must be taken before sharding, and shards or places everything on the rank's device.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

from ..models.loading import load_policy
from ..models.lora import adapter_snapshot, copy_adapter, is_lora, parameter_counts, plain_copy
from .distributed import DistState, shard_model
from .precision import autocast_forward, check_master_precision, compute_dtype


@dataclass
class Policy:
    """What :func:`build_policy` returns.

    Attributes:
        model: The trained policy (sharded under FSDP2; adapters inside with LoRA).
        processor: Its transformers processor.
        ref_model: A frozen copy for the KL reference (or a self-teacher that is the reference),
            or None (no reference, or LoRA: the reference is the policy with its adapter disabled).
        rollout_model: Under FSDP with HF rollouts, a full unsharded copy each rank generates with
            (merged, with LoRA), else None.
        lora: Whether the policy carries LoRA adapters.
        lora_reference: With LoRA and a reference that moves, the adapter tensors the moved reference
            will be copied into (allocated after sharding, so shaped like the adapter's shards).
        trainable_fraction: Trainable parameters / all parameters (logged at step 0).
    """

    model: torch.nn.Module
    processor: Any
    ref_model: torch.nn.Module | None
    rollout_model: torch.nn.Module | None
    lora: bool
    lora_reference: dict[str, torch.Tensor] | None
    trainable_fraction: float


def build_policy(cfg, dist: DistState, reference: bool, moves: bool) -> Policy:
    """Load ``cfg.model``, copy what needs copying, then shard (FSDP2) or move to the device.
    ``reference``: the run needs a frozen reference (the KL's, or a self-teacher's); ``moves``: it
    will be moved to the policy during the run (:func:`move_reference`: after a warm-up, at teacher
    syncs)."""
    m = cfg.model
    model, processor = load_policy(
        m.path,
        m.dtype,
        m.gradient_checkpointing,
        m.freeze_vision_tower,
        lora=m.lora,
        attn_implementation=m.attn_implementation,
    )
    model.train()
    check_master_precision(model, cfg)  # before anything is copied or sharded: a fast refusal
    compute = compute_dtype(cfg)
    lora = is_lora(model)
    trainable, total = parameter_counts(model)
    # copies made before sharding: the reference policy, and a full model for HF rollouts under
    # FSDP (generation through a sharded model would all-gather every layer at every token).
    # With LoRA the reference is the same model with its adapter disabled: no copy
    # (``models/lora.py``); after the warm-up, a snapshot of the adapter (allocated below so that
    # it is sharded like the adapter and a resume can load into it).
    # frozen copies need no fp32 masters: they are held in the compute dtype (half the memory)
    ref_model = None
    if reference and not lora:
        ref_model = copy.deepcopy(model).eval().requires_grad_(False).to(compute)
    rollout_model = None
    # (and one to generate with during the update when rollouts overlap it: rollout.mode)
    # (none when the engine runs in a process of its own: rollout.placement=separate)
    separate = cfg.rollout.placement == "separate"
    if cfg.rollout.engine == "hf" and not separate and (dist.enabled or cfg.rollout.overlaps):
        copied = plain_copy(model) if lora else copy.deepcopy(model)
        rollout_model = copied.eval().requires_grad_(False).to(dist.device, compute)
    if dist.sp_size > 1:  # Ulysses sequence parallelism inside the language models
        from ..models.sequence_parallel import enable

        for m in (model, ref_model):
            if m is not None:
                enable(m, dist.sp)
    if dist.enabled:
        shard_model(model, cfg.distributed, dist)  # moves shards to the rank's GPU
        if ref_model is not None:
            shard_model(ref_model, cfg.distributed, dist)
    else:  # one process: the GPU when there is one (inputs are moved to the model's device)
        model.to(dist.device)
        autocast_forward(model, compute, dist.device)  # FSDP2's mixed precision does this above
        if ref_model is not None:
            ref_model.to(dist.device)
    lora_reference = adapter_snapshot(model) if lora and reference and moves else None
    return Policy(model, processor, ref_model, rollout_model, lora, lora_reference, trainable / max(total, 1))


def move_reference(policy: Policy) -> bool:
    """Make the reference the policy as it is now; whether there was a reference to move.

    After the warm-up: KL should hold the policy near where RL starts, not pull it back to the
    cold start the warm-up just left. At a teacher sync (``algorithm.distill.sync_steps``): the
    self-teacher is the policy of a few steps ago. A reference model gets the policy's weights;
    with LoRA the adapter is copied into the snapshot the reference forward uses (on the same base
    weights).
    """
    if policy.ref_model is not None:
        policy.ref_model.load_state_dict(policy.model.state_dict())
        return True
    if policy.lora_reference is not None:
        copy_adapter(policy.model, policy.lora_reference)
        return True
    return False
