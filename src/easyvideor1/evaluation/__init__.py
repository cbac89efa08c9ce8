"""Video benchmark evaluation: a registry of benchmark specs, prompts and official metrics.

``pipeline.py`` runs a benchmark through the shared load -> generate -> score pipeline of
``rollout/`` (resumable predictions); prompts come from the one renderer (``data/prompt.py``) and
scoring uses the same reward library as training (:func:`easyvideor1.rewards.compute_score`).
"""

from ..data.prompt import BENCHMARK_PROMPT as render_prompt  # (record, style) -> the generic prompt
from .metrics import Scored
from .registry import BenchmarkSpec, get_benchmark, list_benchmarks, register_benchmark

__all__ = [
    "BenchmarkSpec",
    "Scored",
    "get_benchmark",
    "list_benchmarks",
    "register_benchmark",
    "render_prompt",
]
