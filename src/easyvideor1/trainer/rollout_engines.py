"""The trainer's rollout engine, and keeping its weights equal to the trainer's.

One process with the HF engine generates with the training model itself. Every other set-up holds a
separate copy (a full HF model per rank under FSDP, or a vLLM engine), which receives the trainer's
weights after every optimizer step, one tensor at a time. With LoRA the copy is the plain base
architecture: it receives the merged weights (``W + scaling * B @ A``, base-model names; see
``models.lora_merge``), computed without touching the training model. With
``rollout.vllm.lora_sync: adapter`` a vLLM engine runs the base weights plus vLLM's LoRA, and only
the adapter travels (written as a PEFT directory that vLLM loads).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import weakref

import torch

from ..models.lora_merge import adapter_state, has_lora, merged_state_dict
from ..rollout.base import RolloutEngine
from ..rollout.hf import HFRolloutEngine
from .distributed import DistState


def make_rollout_engine(cfg, processor, model, state: DistState, owns_weights: bool = False) -> RolloutEngine:
    """``rollout.engine``: ``hf`` over ``model`` (a separate copy when ``owns_weights``), or one vLLM
    engine for this rank."""
    if cfg.rollout.engine == "vllm":
        from ..models.families import family_of_model
        from ..rollout.vllm import VLLMRolloutEngine

        family = family_of_model(model)
        if family.vllm_weight_push:  # the engine would keep sampling from the first weights
            raise ValueError(
                f"rollout.engine=vllm cannot train {family.model_type}: {family.vllm_weight_push}; "
                "use rollout.engine=hf (vLLM still serves it for evaluation)"
            )
        v = cfg.rollout.vllm
        adapter = v.lora_sync == "adapter" and _check_adapter_sync(model)
        return VLLMRolloutEngine.from_config(
            cfg.model.path,
            processor,
            v,
            dtype=cfg.model.dtype,
            seed=cfg.trainer.seed + 1_000_003 * state.rank,  # every rank samples prompts of its own
            colocated=True,
            max_lora_rank=cfg.model.lora.rank if adapter else 0,
        )
    if cfg.rollout.placement == "separate":
        return _separate_engine(cfg, processor, model, state)
    return HFRolloutEngine(model, processor, owns_weights=owns_weights)


def _separate_engine(cfg, processor, model, state: DistState) -> RolloutEngine:
    """``rollout.placement=separate``: the HF engine in a child process, on a GPU of its own or,
    on CPUs, with half of this process's threads (the trainer keeps the rest)."""
    from ..rollout.remote import RemoteHFEngine

    device = "cpu"
    if state.device.type == "cuda":
        gpus = torch.cuda.device_count()
        if gpus <= state.world:
            raise ValueError(
                f"rollout.placement=separate needs a GPU for the engine: {gpus} visible, all used by "
                f"the trainer's {state.world} rank(s) (use rollout.placement=colocated)"
            )
        device = f"cuda:{gpus - 1}"
    threads = torch.get_num_threads()
    engine_threads = max(1, threads // 2)
    if device == "cpu":
        torch.set_num_threads(max(1, threads - engine_threads))
    return RemoteHFEngine(
        cfg.model.path,
        processor,
        model,
        dtype=cfg.model.dtype,
        device=device,
        threads=engine_threads,
        seed=cfg.trainer.seed + 1_000_003 * state.rank,
    )


def _check_adapter_sync(model: torch.nn.Module) -> bool:
    """Whether ``rollout.vllm.lora_sync: adapter`` applies: a LoRA policy whose adapters are all
    in the language model (vLLM's LoRA does not cover the vision tower here)."""
    if not has_lora(model):
        log.info("rollout.vllm.lora_sync=adapter without model.lora: full weights are pushed")
        return False
    from peft.tuners.lora import LoraLayer

    from ..models.families import family_of_model

    vision = family_of_model(model).vision_modules(model)  # the tower (InternVL: and its projector)
    inside = [m for v in vision for m in v.modules() if isinstance(m, LoraLayer)]
    if inside:
        raise ValueError(
            "rollout.vllm.lora_sync=adapter: the adapter reaches the vision tower, which vLLM's LoRA "
            "does not serve here; use rollout.vllm.lora_sync=merged or language-model targets only"
        )
    return True


log = logging.getLogger(__name__)


class EngineHandoff:
    """The rollout engine's side of an update, as one context object.

    ``with handoff: update()`` puts the engine to sleep first when ``sleep`` is set (vLLM sleep
    mode gives its accelerator memory to the update), and after a successful update wakes it up
    and pushes the new weights to an engine that holds its own copy (``engine.owns_weights``).
    :meth:`push` alone is the sync after a warm-up or a resume. The push is a collective under
    FSDP (the shards are gathered): every rank enters and leaves the context together.

    ``deferred`` (rollouts generated ahead, ``rollout.mode`` one_step_off / async): the engine may
    be generating while the trainer pushes, so :meth:`push` only takes a copy of the new weights
    and :meth:`apply_pending` (called by the rollout thread before each batch) loads it.
    :attr:`version` counts the updates behind the weights the engine holds, :attr:`pushed` those
    behind the newest weights pushed (equal unless a deferred push waits).
    """

    def __init__(
        self, engine: RolloutEngine, model: torch.nn.Module, sleep: bool = False, deferred: bool = False
    ):
        self.engine, self.model, self.sleep, self.deferred = engine, model, sleep, deferred
        self._adapter_dir: str | None = None
        self.version = self.pushed = 0
        self._pending: tuple[int, dict[str, torch.Tensor]] | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> EngineHandoff:
        if self.sleep:
            self.engine.sleep()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:  # the update failed: leave the engine as it is, the error propagates
            return
        if self.sleep:
            self.engine.wake_up()
        self.pushed += 1
        self.push()

    def push(self) -> None:
        """Give the engine the trainer's weights (gathered from FSDP shards, LoRA merged in), or
        only the adapter to an engine running vLLM's LoRA; a no-op for an engine that generates
        with the training model itself. They are the :attr:`pushed` version."""
        version = self.pushed
        if not self.engine.owns_weights:
            self.version = version
            return
        if self.deferred:  # a copy now (the model changes at the next update), loaded between batches
            adapter = self.engine.adapter_sync and has_lora(self.model)
            with torch.no_grad():
                tensors = adapter_state(self.model) if adapter else merged_state_dict(self.model)
                copy = {k: v.clone() for k, v in dict(tensors).items()}
            with self._lock:
                self._pending = (version, adapter, copy)
            return
        self.version = version
        with torch.no_grad():
            if self.engine.adapter_sync and has_lora(self.model):
                self._push_adapter()
            else:
                self.engine.update_weights(merged_state_dict(self.model))

    def renumber(self, version: int) -> None:
        """The weights pushed and held are ``version`` (a resumed run's step)."""
        with self._lock:
            self.version = self.pushed = version
            if self._pending is not None:
                self._pending = (version, *self._pending[1:])

    def apply_pending(self) -> int:
        """Load the newest weights pushed since the last call (rollout thread, between batches);
        the version the engine holds now."""
        with self._lock:
            pending, self._pending = self._pending, None
        if pending is not None:
            version, adapter, tensors = pending
            with torch.no_grad():
                if adapter:
                    self._push_adapter(tensors)
                else:
                    self.engine.update_weights(tensors.items())
            self.version = version
        return self.version

    def _push_adapter(self, tensors: dict[str, torch.Tensor] | None = None) -> None:
        from ..models.lora import save_adapter

        if tensors is None:  # gathered on every rank: each rank has its own engine
            tensors = adapter_state(self.model)
        if self._adapter_dir is None:
            self._adapter_dir = tempfile.mkdtemp(prefix="evr1_adapter_")
            # removed with the handoff (or at exit) even if close() is never called
            self._cleanup = weakref.finalize(self, shutil.rmtree, self._adapter_dir, True)
        save_adapter(self.model, self._adapter_dir, tensors)
        self.engine.update_adapter(self._adapter_dir)  # read now: the files may be rewritten

    def close(self) -> None:
        """Remove the adapter files written for an adapter-only sync."""
        if self._adapter_dir is not None:
            self._cleanup()
            self._adapter_dir = None
