"""``easyvideor1 plan``: each phase's memory per GPU, the KV cache's room and the FLOPs and time of a
step at full scale, predicted without a GPU from the run's config.

Flow: ``architecture.py`` (the model's facts and exact parameter counts, built without weights) ->
``workload.py`` (the worst micro-batch and the per-rank work the settings allow) -> ``memory.py``
(each phase's memory, part by part) and ``flops.py`` (FLOPs, bytes moved, a time estimate) ->
``verdict.py`` (fits or not, by how much, the settings that would make a phase fit) ->
``report.py`` (the table and the JSON). ``config.py`` is the ``plan`` section (the machine).
"""

from __future__ import annotations

import importlib

# loaded on first use: the config imports ``plan.config`` and must not load torch with it
_EXPORTS = {"Hardware": "hardware", "Plan": "verdict", "PhaseVerdict": "verdict", "plan": "verdict"}
__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
