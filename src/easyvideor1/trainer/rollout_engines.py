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
import os
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
        if family.engine.vllm_weight_push:  # the engine would keep sampling from the first weights
            raise ValueError(
                f"rollout.engine=vllm cannot train {family.model_type}: {family.engine.vllm_weight_push}; "
                "use rollout.engine=hf (vLLM still serves it for evaluation)"
            )
        v = cfg.rollout.vllm
        adapter = v.lora_sync == "adapter" and _check_adapter_sync(model)
        return VLLMRolloutEngine.from_config(
            cfg.model.path,
            processor,
            v,
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
        attn_implementation=cfg.model.attn_implementation,
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

    vision = family_of_model(model).vision.modules(model)  # the tower (InternVL: and its projector)
    inside = [m for v in vision for m in v.modules() if isinstance(m, LoraLayer)]
    if inside:
        raise ValueError(
            "rollout.vllm.lora_sync=adapter: the adapter reaches the vision tower, which vLLM's LoRA "
            "does not serve here; use rollout.vllm.lora_sync=merged or language-model targets only"
        )
    return True


log = logging.getLogger(__name__)


def free_cached_memory() -> None:
    """Give the accelerator memory PyTorch's caching allocator holds but no tensor uses back to
    the device: vLLM's sleep mode maps its weights and KV cache outside that cache, so a wake-up
    after an update would otherwise find the device full of the update's freed blocks."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def memory_in_use_gib() -> float:
    """What the device holds now, in GiB: on a GPU all of it (``mem_get_info``: PyTorch's cache,
    vLLM's own allocations and every other process's), on a CPU this process's resident memory."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        free, total = torch.cuda.mem_get_info()
        return (total - free) / 2**30
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**30


class _PeakMemory:
    """The device memory in use at the peak of what runs from now on, in GiB (as
    :func:`memory_in_use_gib` counts it), read without resetting anyone's peak counters (a user's
    or a tool's ``max_memory_*`` / ``ru_maxrss`` readings stay theirs). On a GPU: what was in use at
    the start plus the growth of PyTorch's reserved memory, which only grows until the cache is
    freed (the handoff frees it after the update), so its value at the end is the peak. On a CPU:
    this process's resident high-water mark so far."""

    def __init__(self) -> None:
        self.cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        self.start = memory_in_use_gib()
        self.reserved = torch.cuda.memory_reserved() if self.cuda else 0

    def gib(self) -> float:
        if self.cuda:
            return self.start + max(0, torch.cuda.memory_reserved() - self.reserved) / 2**30
        with open("/proc/self/status") as f:
            hwm = next(line for line in f if line.startswith("VmHWM:"))
        return int(hwm.split()[1]) / 2**20


class EngineHandoff:
    """The rollout engine's side of a step, in the one order that fits a colocated engine and
    trainer on one device (``docs/how-to/gpu.md``):

    generate -> :meth:`release` (sleep: level 2 when the next push rewrites every weight, level 1
    when only an adapter travels and the base weights must survive) -> old/reference log-probs and
    the update -> free the allocator's cache -> wake the weights -> push -> free the cache -> wake
    the KV cache -> generate.

    ``with handoff: update()`` is the update's part: it releases the engine if the step has not
    yet, and after a successful update runs the rest (:meth:`resume`). :meth:`ensure_awake` is
    called before anything generates (validation, a step's rollouts), so an engine left asleep (a
    step that failed after releasing it) wakes with the current weights. Engines without sleep
    mode (HF, vLLM on a CPU) get the same calls as no-ops, and freeing the cache does nothing on a
    CPU, so the order is the same everywhere. The push is a collective under FSDP (the shards are
    gathered): every rank enters and leaves the context together.

    ``deferred`` (rollouts generated ahead, ``rollout.mode`` one_step_off / async): the engine may
    be generating while the trainer pushes, so it never sleeps, :meth:`push` only stages a host
    copy of the new weights (pinned on a GPU, in the engine's dtype) and :meth:`apply_pending`
    (called by the rollout thread before each batch) loads it. :attr:`version` counts the updates
    behind the weights the engine holds, :attr:`pushed` those behind the newest weights pushed
    (equal unless a deferred push waits).

    :attr:`memory` holds the device memory in use (GiB, :func:`memory_in_use_gib`) at each phase
    boundary of the last step, logged as ``memory/<phase>_gib``.
    """

    def __init__(
        self, engine: RolloutEngine, model: torch.nn.Module, sleep: bool = False, deferred: bool = False
    ):
        if sleep and deferred:
            raise ValueError("an engine that generates during the update cannot sleep through it")
        self.engine, self.model, self.sleep, self.deferred = engine, model, sleep, deferred
        self._adapter_dir: str | None = None
        self.version = self.pushed = 0
        self._pending: tuple[int, bool, dict[str, torch.Tensor]] | None = None
        self._lock = threading.Lock()
        self.asleep = 0  # the level the engine sleeps at (0: awake)
        self.memory: dict[str, float] = {}

    @property
    def adapter_only(self) -> bool:
        """Only a LoRA adapter travels to the engine (its base weights stay as they were)."""
        return self.engine.adapter_sync and has_lora(self.model)

    def mark(self, phase: str) -> None:
        """Record the device memory in use at ``phase`` (a boundary of the step)."""
        self.memory[phase] = memory_in_use_gib()

    def release(self) -> None:
        """Generation is over until the next push: the engine sleeps (with ``sleep``)."""
        self.mark("after_generation")
        if self.sleep and not self.asleep:
            self.asleep = 1 if self.adapter_only else 2
            self.engine.sleep(level=self.asleep)
            self.mark("after_sleep")

    def resume(self) -> None:
        """After training: free the cache, wake the weights, push the trainer's, free the cache
        again, wake the KV cache (each step a no-op where it does not apply)."""
        free_cached_memory()
        if self.asleep:
            self.engine.wake_up(tags=["weights"])
            self.mark("after_wake_weights")
        self.push()
        free_cached_memory()
        if self.asleep:
            self.engine.wake_up(tags=["kv_cache"])
            self.asleep = 0
        self.mark("after_wake_kv_cache")

    def ensure_awake(self) -> None:
        """Before generating: an engine still asleep wakes with the current weights (level 2
        discarded its own)."""
        if self.asleep:
            self.resume()

    def __enter__(self) -> EngineHandoff:
        if not self.deferred:
            self.release()
        self._peak = _PeakMemory()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:  # the update failed: leave the engine as it is, the error propagates
            return
        self.memory["update_peak"] = self._peak.gib()
        self.pushed += 1
        self.resume()

    def push(self) -> None:
        """Give the engine the trainer's weights (gathered from FSDP shards, LoRA merged in), or
        only the adapter to an engine running vLLM's LoRA; a no-op for an engine that generates
        with the training model itself. They are the :attr:`pushed` version."""
        version = self.pushed
        if not self.engine.owns_weights:
            self.version = version
            return
        if self.deferred:  # a host copy now (the model changes at the next update), loaded between batches
            adapter = self.adapter_only
            with torch.no_grad():
                if adapter:
                    staged = staged_copy(adapter_state(self.model).items())
                else:  # in the engine's dtype: a bf16 engine needs no fp32 host copy
                    staged = staged_copy(merged_state_dict(self.model), self.engine.weight_dtype)
            with self._lock:
                self._pending = (version, adapter, staged)
            return
        self.version = version
        with torch.no_grad():
            if self.adapter_only:
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


def staged_copy(tensors, dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
    """Host copies of ``(name, tensor)`` pairs (floating ones cast to ``dtype`` when given): a
    deferred push must outlive the next update without holding a second copy of every weight in
    accelerator memory. From a GPU the copies go to pinned memory, asynchronously, with one
    synchronisation at the end."""
    out: dict[str, torch.Tensor] = {}
    gpu = False
    for name, t in tensors:
        t = t.detach()
        if dtype is not None and t.is_floating_point():
            t = t.to(dtype)
        if t.device.type == "cuda":
            host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            host.copy_(t, non_blocking=True)
            gpu = True
        else:
            host = t.clone()
        out[name] = host
    if gpu:
        torch.cuda.synchronize()  # every copy landed before the tensors are handed over
    return out
