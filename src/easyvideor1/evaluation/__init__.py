"""Video benchmark evaluation: a registry of benchmark specs, prompts and official metrics.

The asynchronous generation pipeline is not here yet; scoring uses the same reward library as
training (:func:`easyvideor1.rewards.compute_score`).
"""

from .metrics import Scored
from .prompts import render_prompt
from .registry import BenchmarkSpec, get_benchmark, list_benchmarks, register_benchmark

__all__ = [
    "BenchmarkSpec",
    "Scored",
    "get_benchmark",
    "list_benchmarks",
    "register_benchmark",
    "render_prompt",
]
