"""The trainer's rollout engine, and keeping its weights equal to the trainer's.

One process with the HF engine generates with the training model itself. Every other set-up holds a
separate copy (a full HF model per rank under FSDP, or a vLLM engine), which receives the trainer's
weights after every optimizer step, one tensor at a time. With LoRA the copy is the plain base
architecture: it receives the merged weights (``W + scaling * B @ A``, base-model names; see
``models.lora_merge``), computed without touching the training model.
"""

from __future__ import annotations

import torch

from ..models.lora_merge import merged_state_dict
from ..rollout.base import RolloutEngine
from ..rollout.hf import HFRolloutEngine
from .distributed import DistState


def make_rollout_engine(cfg, processor, model, state: DistState, owns_weights: bool = False) -> RolloutEngine:
    """``rollout.engine``: ``hf`` over ``model`` (a separate copy when ``owns_weights``), or one vLLM
    engine for this rank."""
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
    return HFRolloutEngine(model, processor, owns_weights=owns_weights)


class EngineHandoff:
    """The rollout engine's side of an update, as one context object.

    ``with handoff: update()`` puts the engine to sleep first when ``sleep`` is set (vLLM sleep
    mode gives its accelerator memory to the update), and after a successful update wakes it up
    and pushes the new weights to an engine that holds its own copy (``engine.owns_weights``).
    :meth:`push` alone is the sync after a warm-up or a resume. The push is a collective under
    FSDP (the shards are gathered): every rank enters and leaves the context together.
    """

    def __init__(self, engine: RolloutEngine, model: torch.nn.Module, sleep: bool = False):
        self.engine, self.model, self.sleep = engine, model, sleep

    def __enter__(self) -> EngineHandoff:
        if self.sleep:
            self.engine.sleep()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:  # the update failed: leave the engine as it is, the error propagates
            return
        if self.sleep:
            self.engine.wake_up()
        self.push()

    def push(self) -> None:
        """Give the engine the trainer's weights (gathered from FSDP shards, LoRA merged in); a
        no-op for an engine that generates with the training model itself."""
        if self.engine.owns_weights:
            with torch.no_grad():
                self.engine.update_weights(merged_state_dict(self.model))
