"""Small checks for config dataclasses: every error names the dotted key, the rule and the value.

A setting that is out of range should fail when the config is loaded, not silently do nothing
(``micro_batch_size=-1`` once ran zero updates and exited 0) or crash mid-run with a traceback.
NaN never passes a check (every comparison with NaN is false) and infinities fail ``finite``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from .errors import ConfigError


def require(ok: bool, key: str, rule: str, value: Any) -> None:
    """Raise ``ConfigError("<key> <rule>, got <value>")`` unless ``ok``."""
    if not ok:
        raise ConfigError(f"{key} {rule}, got {value!r}")


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def whole_number(key: str, value: Any, low: int = 0, meaning: str = "") -> None:
    """``value`` is an ``int`` (a bool is not) of at least ``low``; ``meaning`` explains a special
    value in the message ("0: no LoRA")."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= low
    require(ok, key, f"must be a whole number >= {low}" + (f" ({meaning})" if meaning else ""), value)


def positive(key: str, value: Any) -> None:
    require(_number(value) and value > 0, key, "must be > 0", value)


def non_negative(key: str, value: Any) -> None:
    require(_number(value) and value >= 0, key, "must be >= 0", value)


def at_least(key: str, value: Any, low: float) -> None:
    require(_number(value) and value >= low, key, f"must be >= {low}", value)


def in_range(key: str, value: Any, low: float, high: float, *, low_open: bool = False) -> None:
    """``low <= value <= high`` (``low < value`` with ``low_open``)."""
    ok = _number(value) and (value > low if low_open else value >= low) and value <= high
    require(ok, key, f"must be in {'(' if low_open else '['}{low}, {high}]", value)


def finite_floats(tree: Any, prefix: str = "") -> None:
    """Refuse a NaN or infinite float anywhere in ``tree`` (a config as plain dicts and lists),
    naming its dotted key: every float key at once, before any section's own checks run."""
    if isinstance(tree, dict):
        for key, value in tree.items():
            finite_floats(value, f"{prefix}{key}.")
    elif isinstance(tree, (list, tuple)):
        for index, value in enumerate(tree):
            finite_floats(value, f"{prefix}{index}.")
    elif isinstance(tree, float):
        require(math.isfinite(tree), prefix[:-1], "must be a finite number", tree)


def one_of(key: str, value: Any, choices: Iterable[str]) -> None:
    choices = tuple(choices)
    require(value in choices, key, f"must be one of {', '.join(choices)}", value)
