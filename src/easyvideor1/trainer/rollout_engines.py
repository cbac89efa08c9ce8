"""The trainer's rollout engine, and keeping its weights equal to the trainer's.

One process with the HF engine generates with the training model itself. Every other set-up holds a
separate copy (a full HF model per rank under FSDP, or a vLLM engine), which receives the trainer's
weights after every optimizer step, one tensor at a time.
"""

from __future__ import annotations

import torch

from ..rollout.hf import HFRolloutEngine
from .distributed import DistState, full_weights


def make_rollout_engine(cfg, processor, model, state: DistState):
    """``rollout.engine``: ``hf`` over ``model``, or one vLLM engine for this rank."""
    if cfg.rollout.engine == "vllm":
        from ..rollout.vllm import VLLMRolloutEngine

        v = cfg.rollout.vllm
        return VLLMRolloutEngine(
            cfg.model.path,
            processor,
            dtype=cfg.model.dtype,
            seed=cfg.trainer.seed + 1_000_003 * state.rank,
            max_model_len=v.max_model_len or None,
            gpu_memory_utilization=v.gpu_memory_utilization,
            tensor_parallel_size=v.tensor_parallel_size,
            enforce_eager=v.enforce_eager,
            in_process=v.in_process,
            enable_sleep_mode=v.sleep_between_phases,
        )
    return HFRolloutEngine(model, processor)


def push_weights(model, rollout_model, engine) -> None:
    """Copy ``model``'s weights (gathered from FSDP shards if sharded) into the engine's copy.

    A collective under FSDP: every rank calls it. A no-op for the HF engine over ``model`` itself.
    """
    if rollout_model is not None:
        with torch.no_grad():
            target = rollout_model.state_dict()
            for name, tensor in full_weights(model):
                target[name].copy_(tensor)
    elif hasattr(engine, "update_weights"):
        engine.update_weights(full_weights(model))
