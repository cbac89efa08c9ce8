"""The embedded demos, each on a tiny model and synthetic videos, on a CPU in minutes:
``easyvideor1 demo`` (:mod:`.basic`), ``demo --tools`` (:mod:`.tools`) and ``demo --distill``
(:mod:`.distill`); what they share is :mod:`.common`."""

from .basic import run_demo
from .common import CHANCE, demo_config_path, prepare_demo_assets
from .distill import distill_ratio, distill_teacher, run_distill_demo
from .tools import REFUSED, run_tool_demo, window_hit_rate

__all__ = [
    "CHANCE",
    "REFUSED",
    "demo_config_path",
    "distill_ratio",
    "distill_teacher",
    "prepare_demo_assets",
    "run_demo",
    "run_distill_demo",
    "run_tool_demo",
    "window_hit_rate",
]
