"""Every rollout engine kind in one registry, each with its two constructors.

An engine kind (``hf``, ``vllm``) is one module that calls :func:`register_engine` with

- ``train``: the engine a training run generates with, around the policy it trains
  (:class:`TrainingEngineRequest`: the run config, the model, this rank's place), and
- ``serve``: the engine a job serving a checkpoint generates with (``eval``, ``filter``,
  ``serve``; :class:`ServingEngineRequest`: the checkpoint directory, its dtype, the ``rollout.vllm``
  section), with the processor it loaded.

The names accepted by ``rollout.engine``, ``eval.engine``, ``trainer.eval.engine`` and the
``filter`` engine are this registry's. Every module in ``rollout/kinds/`` is a built-in kind,
imported on the first lookup; each imports nothing heavy at module level, so checking a config's
engine name loads no torch. Adding an engine is one module there (or a plugin file) that calls
:func:`register_engine`; its settings are a section of its own (as ``rollout.vllm``).
"""

from __future__ import annotations

import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..registry import Registry

# every module of rollout/kinds/, found without importing it
_KINDS = Path(__file__).with_name("kinds")
_BUILTINS = tuple(f"{__package__}.kinds.{m.name}" for m in pkgutil.iter_modules([str(_KINDS)]))


@dataclass(frozen=True)
class TrainingEngineRequest:
    """What a training engine is built from.

    Attributes:
        cfg: the run config (``rollout``, ``model``, ``trainer.seed``).
        processor: the policy's processor.
        model: the policy being trained (the HF engine generates with it, or with a copy of it).
        rank, world: this process's rank and the number of trainer ranks.
        device: the trainer's device on this rank.
        owns_weights: the HF engine's model is a separate copy that receives pushed weights.
    """

    cfg: Any
    processor: Any
    model: Any
    rank: int = 0
    world: int = 1
    device: Any = None
    owns_weights: bool = False

    @property
    def seed(self) -> int:
        """The engine's sampling seed: every rank samples prompts of its own."""
        return self.cfg.trainer.seed + 1_000_003 * self.rank


@dataclass(frozen=True)
class ServingEngineRequest:
    """What an engine serving a checkpoint is built from.

    Attributes:
        model: the checkpoint directory.
        dtype: the weights' dtype (``float32``, ``bfloat16``, ``auto``).
        vllm: the ``rollout.vllm`` section (vLLM only; ``None``: its defaults).
        max_batch: requests per ``generate`` call (HF only).
    """

    model: str
    dtype: str = "float32"
    vllm: Any = None
    max_batch: int = 4


@dataclass(frozen=True)
class EngineKind:
    """One engine kind's constructors (see the module docstring)."""

    name: str
    train: Callable[[TrainingEngineRequest], Any]
    serve: Callable[[ServingEngineRequest], tuple[Any, Any]]


ENGINES: Registry[EngineKind] = Registry(
    "rollout engine",
    builtins=_BUILTINS,
    how_to_add="register one with easyvideor1.rollout.engines.register_engine",
)


def register_engine(
    name: str,
    *,
    train: Callable[[TrainingEngineRequest], Any],
    serve: Callable[[ServingEngineRequest], tuple[Any, Any]],
    override: bool = False,
) -> EngineKind:
    """Register the engine kind ``name`` with its training and serving constructors."""
    kind = EngineKind(name, train, serve)
    ENGINES.register(name, kind, override=override)
    return kind


def engine_names() -> tuple[str, ...]:
    """The engine kinds a config may name."""
    return tuple(ENGINES.names())


def make_rollout_engine(cfg, processor, model, state, owns_weights: bool = False):
    """The training engine of ``rollout.engine`` for this rank (``state``: the trainer's
    ``DistState``, read for ``rank``, ``world`` and ``device``)."""
    request = TrainingEngineRequest(
        cfg,
        processor,
        model,
        rank=getattr(state, "rank", 0),
        world=getattr(state, "world", 1),
        device=getattr(state, "device", None),
        owns_weights=owns_weights,
    )
    return ENGINES.get(cfg.rollout.engine).train(request)


def load_engine(model: str, engine: str, dtype: str, vllm=None, max_batch: int = 4):
    """``(engine, processor)`` serving checkpoint ``model`` with the engine kind ``engine``."""
    return ENGINES.get(engine).serve(ServingEngineRequest(model, dtype, vllm, max_batch))
