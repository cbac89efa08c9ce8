"""The run config finished once: what the model's checkpoint decides, filled in before anything runs.

A config as loaded (:func:`~easyvideor1.config.load_config`) holds what the user wrote. The
checkpoint decides more: the model's family (its frame rule and resize factor, chat format and
vision layout) and, for some families, settings of the ``data`` section (InternVL: the frame size,
from its tile size). :func:`resolve_config` names the family from the checkpoint and returns the
finished config. Every entry point (``train`` and the demo through the trainer, ``eval``,
``filter``, ``preprocess``) calls it once, and nothing changes the config afterwards: what differs
per phase is passed as a value (``rollout.validation_sampling()``, ``dataclasses.replace``).

The config classes stay pure data: reading a checkpoint happens here, not in them.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from .data.config import DataConfig

C = TypeVar("C")


def resolve_config(cfg: C, model_path: str | None = None) -> C:
    """``cfg`` (a run config) finished for the model at ``model_path`` (default ``model.path``):
    ``data.model_family`` named by the checkpoint (a configured family that disagrees is an error)
    and the data settings the family derives from the checkpoint filled in. A new config; ``cfg``
    is not changed. Resolving a finished config again gives an equal one."""
    path = model_path or cfg.model.path
    return dataclasses.replace(cfg, data=resolve_data(cfg.data, path))


def resolve_data(data: DataConfig, model_path: str) -> DataConfig:
    """The ``data`` section finished for the checkpoint at ``model_path`` (see :func:`resolve_config`;
    for the jobs that take the data section alone)."""
    from .models.families import resolve_family

    family = resolve_family(model_path, data.model_family)  # the checkpoint decides; a mismatch raises
    # a configured spelling stays as the user wrote it; without one the checkpoint names it
    named = (
        data if data.model_family is not None else dataclasses.replace(data, model_family=family.model_type)
    )
    return family.fit_data_config(named, model_path)  # what the checkpoint decides (InternVL: frame size)
