"""Moved to :mod:`easyvideor1.data.preprocess`: the batch job reads records, so it belongs to
``data``, which uses ``media`` (and ``media`` imports nothing from ``data``).

Old imports (``from easyvideor1.media.preprocess import preprocess``) keep working: a name is looked
up in the new module when it is first asked for, so importing ``media`` alone never imports ``data``.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    from ..data import preprocess as moved

    return getattr(moved, name)
