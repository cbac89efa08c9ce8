"""The family registry: checkpoint ``model_type`` (or an alias) -> :class:`ModelFamily`.

The family of a run comes from the checkpoint (``config.json``); ``data.model_family`` is only an
optional check against it, and the way to name a family when no model is known (``preprocess``
without ``--model``). :func:`resolve_family` is the one place that decides.
"""

from __future__ import annotations

import copy
import json
import os
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError, UserError
from ...registry import Registry, UnknownNameError, normalize_name

if TYPE_CHECKING:
    from .base import ModelFamily


class UnknownFamilyError(UnknownNameError):
    """A family name (``data.model_family``, ``--model-family``) that no family answers to."""


class NotAModelDirectoryError(UserError, FileNotFoundError):
    """A model path without a ``config.json`` (also a ``FileNotFoundError``, as callers catch)."""


# the family modules register themselves when the package is imported (its __init__ imports them
# all), and Python imports the package before this module: every lookup finds them registered
FAMILIES: Registry[ModelFamily] = Registry(
    "model family",
    error=UnknownFamilyError,
    how_to_add="See docs/concepts/model-families.md ('Adding a model family')",
)


def register(family: ModelFamily) -> ModelFamily:
    """Add a family (called once by each family module at import)."""
    return FAMILIES.register(family.model_type, family, aliases=family.aliases)


def family_names() -> tuple[str, ...]:
    """Registered ``model_type`` names, sorted (not in import order: an MoE family's module imports
    its dense family's first)."""
    return tuple(FAMILIES.names())


def all_names() -> tuple[str, ...]:
    """Every accepted spelling (model types and aliases, normalised), family by family: CLI choices."""
    return tuple(
        key for name in family_names() for key in (normalize_name(name), *FAMILIES.entry(name).aliases)
    )


def get_family(name: str) -> ModelFamily:
    """The family named ``name`` (a ``model_type`` such as ``qwen3_5`` or an alias such as
    ``qwen3vl``, any spelling: ``Qwen2.5-VL``); raises :class:`UnknownFamilyError`."""
    return FAMILIES.get(name)


def factor_for_family(name: str) -> int:
    """Resize factor (patch size x spatial merge) of the family ``name``: 28 or 32."""
    return get_family(name).frames.factor


def family_factors() -> tuple[int, ...]:
    """The resize factors of every registered family (28 and 32 today)."""
    return tuple(sorted({entry.value.frames.factor for entry in FAMILIES.entries()}))


def released_names() -> tuple[str, ...]:
    """Every released size a family's table holds (``ModelFamily.released``), family by family."""
    return tuple(name for family in map(get_family, family_names()) for name in family.released)


def released_config(name: str) -> dict[str, Any] | None:
    """The ``config.json`` fields, ``model_type`` included, of the released checkpoint ``name`` as
    its family's table holds them (a copy), or None when no family knows it. ``name`` is the hub
    name (``Qwen/Qwen3-VL-8B-Instruct``) or its last part (``Qwen3-VL-8B-Instruct``), in any case."""
    wanted = name.strip().rstrip("/").lower()
    for family in map(get_family, family_names()):
        for released, fields in family.released.items():
            if wanted in (released.lower(), released.rsplit("/", 1)[-1].lower()):
                return {"model_type": family.model_type, **copy.deepcopy(fields)}
    return None


def family_of_checkpoint(path: str) -> ModelFamily:
    """The family of the checkpoint directory ``path``, from its ``config.json`` ``model_type``."""
    config = os.path.join(path, "config.json")
    if not os.path.isfile(config):
        raise NotAModelDirectoryError(f"{path!r} has no config.json: not a Hugging Face model directory")
    with open(config, encoding="utf-8") as f:
        try:
            model_type = json.load(f).get("model_type")
        except (json.JSONDecodeError, AttributeError) as e:
            raise UserError(f"{config}: not a JSON object ({e})") from None
    if not model_type:
        raise UserError(f"{config}: no model_type key")
    if not isinstance(model_type, str) or model_type not in FAMILIES:
        raise UserError(
            f"{config}: model_type {model_type!r} is not a supported family "
            f"({', '.join(family_names())}); see docs/concepts/model-families.md ('Adding a model family')"
        )
    return get_family(model_type)


def family_of_model(model) -> ModelFamily:
    """The family of a loaded transformers model (its ``config.model_type``)."""
    return get_family(getattr(model.config, "model_type", type(model).__name__))


def resolve_family(
    model_path: str | None, declared: str | None, *, declared_as: str = "data.model_family"
) -> ModelFamily:
    """The family of a run: the checkpoint's at ``model_path`` (its ``config.json`` ``model_type``),
    checked against the ``declared`` one (a setting, ``declared_as`` in messages) when both are given;
    the declared one when there is no model. Every entry point that needs the family asks here.
    """
    if model_path is None:
        if declared is None:
            raise ConfigError(
                "the model family is not known: give a model (model.path, --model PATH) or name the "
                f"family ({declared_as}, --model-family)"
            )
        return get_family(declared)
    actual = family_of_checkpoint(model_path)
    if declared is not None and get_family(declared) is not actual:
        raise ConfigError(
            f"{declared_as} is {declared!r} but the model at {model_path} is {actual.model_type!r} "
            f"(config.json model_type); drop {declared_as} (the model decides) or fix it"
        )
    return actual


def resolve_model_family(configured: str | None, model_path: str) -> str:
    """The family name of ``model_path`` (see :func:`resolve_family`): the configured spelling when
    it names the checkpoint's family (so settings that record it stay as the user wrote them), else
    the checkpoint's ``model_type``."""
    family = resolve_family(model_path, configured)
    return configured if configured is not None else family.model_type
