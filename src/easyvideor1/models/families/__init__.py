"""Model families: one module per family, each registering a :class:`ModelFamily` of its parts.

Everything family-specific (the frame rule and factor, tokens and chat template, the vision
tower's place and calls, processor settings, vLLM's architecture name and quirks, the tiny offline
config) lives here, in a family's parts (``base.py``); the rest of the package asks the part
(``family.frames.factor``, ``family.vision.tower(model)``, ``family.engine.vllm_max_videos``). To add a
family: one module like ``qwen3_5.py`` (its parts, a tiny config and ``register(ModelFamily(...))``),
its import below, and a row in the family test matrix (``tests/models/test_families.py``).
"""

from __future__ import annotations

from . import (  # noqa: F401  (register)
    glm4v,
    glm4v_moe,
    internvl,
    qwen2_5_vl,
    qwen2_vl,
    qwen3_5,
    qwen3_5_moe,
    qwen3_vl,
    qwen3_vl_moe,
)
from .base import QWEN_SPECIAL_TOKENS, QWEN_VISION_TOKENS, VISION_INPUTS, ModelFamily
from .registry import (
    FAMILIES,
    UnknownFamilyError,
    all_names,
    factor_for_family,
    family_factors,
    family_names,
    family_of_checkpoint,
    family_of_model,
    get_family,
    resolve_family,
    resolve_model_family,
)

__all__ = [
    "FAMILIES",
    "QWEN_SPECIAL_TOKENS",
    "QWEN_VISION_TOKENS",
    "VISION_INPUTS",
    "ModelFamily",
    "UnknownFamilyError",
    "all_names",
    "factor_for_family",
    "family_factors",
    "family_names",
    "family_of_checkpoint",
    "family_of_model",
    "get_family",
    "resolve_family",
    "resolve_model_family",
]
