"""The family registry: checkpoint ``model_type`` (or an alias) -> :class:`ModelFamily`.

The family of a run comes from the checkpoint (``config.json``); ``data.model_family`` is only an
optional check against it, and the way to name a family when no model is known (``preprocess``
without ``--model``).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import ModelFamily

_FAMILIES: dict[str, ModelFamily] = {}
_ALIASES: dict[str, str] = {}


def _key(name: str) -> str:
    return str(name).strip().lower().replace("-", "_").replace(".", "_")


def register(family: ModelFamily) -> ModelFamily:
    """Add a family (called once by each family module at import)."""
    for name in family.names:
        owner = _ALIASES.get(_key(name))
        if owner is not None and owner != family.model_type:
            raise ValueError(f"family name {name!r} is taken by {owner}")
        _ALIASES[_key(name)] = family.model_type
    _FAMILIES[family.model_type] = family
    return family


def family_names() -> tuple[str, ...]:
    """Registered ``model_type`` names, in registration order."""
    return tuple(_FAMILIES)


def all_names() -> tuple[str, ...]:
    """Every accepted spelling (model types and aliases): CLI choices."""
    return tuple(_ALIASES)


def get_family(name: str) -> ModelFamily:
    """The family named ``name`` (a ``model_type`` such as ``qwen3_5`` or an alias such as ``qwen3vl``)."""
    model_type = _ALIASES.get(_key(name))
    if model_type is None:
        raise ValueError(f"unknown model family {name!r}; expected one of {', '.join(family_names())}")
    return _FAMILIES[model_type]


def family_of_checkpoint(path: str) -> ModelFamily:
    """The family of the checkpoint directory ``path``, from its ``config.json`` ``model_type``."""
    config = os.path.join(path, "config.json")
    if not os.path.isfile(config):
        raise FileNotFoundError(f"{path!r} has no config.json: not a Hugging Face model directory")
    with open(config, encoding="utf-8") as f:
        try:
            model_type = json.load(f).get("model_type")
        except (json.JSONDecodeError, AttributeError) as e:
            raise ValueError(f"{config}: not a JSON object ({e})") from None
    if not model_type:
        raise ValueError(f"{config}: no model_type key")
    if _key(model_type) not in _ALIASES:
        raise ValueError(
            f"{config}: model_type {model_type!r} is not a supported family "
            f"({', '.join(family_names())}); see README, 'Adding a model family'"
        )
    return get_family(model_type)


def family_of_model(model) -> ModelFamily:
    """The family of a loaded transformers model (its ``config.model_type``)."""
    return get_family(getattr(model.config, "model_type", type(model).__name__))


def resolve_model_family(configured: str | None, model_path: str) -> str:
    """The family of ``model_path``, checked against a configured ``data.model_family`` (if any).

    Returns the configured spelling when it names the checkpoint's family (so settings that
    record it stay as the user wrote them), else the checkpoint's ``model_type``.
    """
    actual = family_of_checkpoint(model_path)
    if configured is None:
        return actual.model_type
    if get_family(configured).model_type != actual.model_type:
        raise ValueError(
            f"data.model_family is {configured!r} but the model at {model_path} is {actual.model_type!r} "
            "(config.json model_type); drop data.model_family (the model decides) or fix it"
        )
    return configured
