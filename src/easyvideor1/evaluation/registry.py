"""The benchmark registry: one small spec per benchmark (loader, prompt rules, metric)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..data.records import Record, load_records
from .metrics import Scored, accuracy


@dataclass(frozen=True)
class BenchmarkSpec:
    """How one benchmark is loaded, prompted and scored.

    Attributes:
        name: Registry name (``easyvideor1 eval --benchmarks NAME``).
        annotation: File name of its unified annotation file (JSON array or JSONL).
        video_dir: Sub-directory of the video root holding its videos.
        aggregate: Samples -> {"score": ..., breakdowns...}; default plain accuracy.
        adapt: Per-record adjustment after loading (e.g. MVBench clip windows).
        breakdown_note: What the official breakdown is, for the report.
    """

    name: str
    annotation: str
    video_dir: str
    aggregate: Callable[[list[Scored]], dict[str, Any]] = field(
        default=lambda rows: {"score": accuracy(rows)}
    )
    adapt: Callable[[Record], Record] | None = None
    breakdown_note: str = ""

    def load(self, annotations_dir: str) -> list[Record]:
        records = load_records(os.path.join(annotations_dir, self.annotation))
        return [self.adapt(r) for r in records] if self.adapt else records


BENCHMARKS: dict[str, BenchmarkSpec] = {}


def register_benchmark(spec: BenchmarkSpec) -> BenchmarkSpec:
    if spec.name in BENCHMARKS:
        raise ValueError(f"benchmark {spec.name!r} is registered twice")
    BENCHMARKS[spec.name] = spec
    return spec


def get_benchmark(name: str) -> BenchmarkSpec:
    from . import specs  # noqa: F401  (registers the built-in benchmarks)

    key = name.strip().lower()
    if key not in BENCHMARKS:
        raise KeyError(f"unknown benchmark {name!r}; known: {', '.join(sorted(BENCHMARKS))}")
    return BENCHMARKS[key]


def list_benchmarks() -> list[str]:
    from . import specs  # noqa: F401

    return sorted(BENCHMARKS)
