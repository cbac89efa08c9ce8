"""Video benchmark evaluation: a registry of benchmark specs, prompts and official metrics.

``pipeline.py`` runs a benchmark (loaders overlapped with generation, resumable predictions) with
the HF engine in batches or vLLM's ``AsyncLLM`` one request per sample (``engines.py``); scoring
uses the same reward library as training (:func:`easyvideor1.rewards.compute_score`).
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
