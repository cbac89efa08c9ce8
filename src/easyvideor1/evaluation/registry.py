"""The benchmark registry: one small spec per benchmark (loader, prompt, scorer, metric).

A spec says how its benchmark is prompted (``build_prompt``), how one response is scored
(``score_response``) and how scored samples become the official numbers (``aggregate``). Samples a
judge-based metric could not score (no judge configured) carry ``scored: False``: they are left out
of the headline and breakdowns and counted as ``not_scored``; proxies (ROUGE, exact match) are
averaged under their own names, never as the metric.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..data.records import Record, RecordError, UnreadableRecord, load_records
from ..errors import UserError
from ..registry import Registry, UnknownNameError
from ..rewards import RewardConfig
from ..rollout.sampling import BENCHMARK_MAX_NEW_TOKENS
from .metrics import Aggregation, Scored, plain_accuracy
from .uncertainty import no_interval

PromptFn = Callable[[Record, str], str]
# (record, response, reward_config, response_length) -> result dict (see BenchmarkSpec.score_response)
ScoreFn = Callable[[Record, str, RewardConfig | None, int | None], dict[str, Any]]

# Proxy numbers a scorer may attach to a sample; averaged as "<name>_proxy", never the headline.
PROXIES = ("rouge_l", "rouge1", "rouge2", "exact_match", "final_answer_found")


@dataclass(frozen=True)
class BenchmarkSpec:
    """How one benchmark is loaded, prompted and scored.

    Attributes:
        name: Registry name (``easyvideor1 eval --benchmarks NAME``).
        annotation: File name of its unified annotation file (JSON array or JSONL).
        video_dir: Sub-directory of the video root holding its videos.
        aggregator: Scored samples -> {"score": ..., breakdowns...}; default plain accuracy.
            ``aggregate`` calls it with the judge-less samples already removed. An
            ``metrics.Aggregation`` also says what the headline's 95% interval rests on; any other
            callable gets none.
        adapt: Per-record adjustment after loading (e.g. MVBench clip windows).
        breakdown_note: What the official breakdown is, for the report.
        prompt: The benchmark's own prompt construction ``(record, style) -> text``; None = the
            generic render of ``prompts.py``.
        scorer: The benchmark's own scoring ``(record, response, reward_config, response_length)
            -> dict``; None = the reward library (open-ended answers need a judge).
        max_new_tokens: Default generation length (official setting, or generous enough for the
            "thinking" style).
        metric: The headline metric's official name ("accuracy", "mIoU", "judge accuracy", ...).
        prompt_source: Where the prompt construction comes from (URL or paper section).
        needs_judge: Whether (part of) the official metric is LLM-judged.
        breakdown_fields: Record fields the breakdowns group by (the report's breakdown filters).
        origin: The file that defined a run-time benchmark (spec file or ``--data`` records file);
            empty for built-ins. An absolute ``annotation`` path is read as it is.
    """

    name: str
    annotation: str
    video_dir: str
    aggregator: Callable[[list[Scored]], dict[str, Any]] = field(default_factory=plain_accuracy)
    adapt: Callable[[Record], Record] | None = None
    breakdown_note: str = ""
    prompt: PromptFn | None = None
    scorer: ScoreFn | None = None
    max_new_tokens: int = BENCHMARK_MAX_NEW_TOKENS
    metric: str = "accuracy"
    prompt_source: str = (
        "generic (data/prompt.py `benchmark`): question, options, the task's answer instruction"
    )
    needs_judge: bool = False
    breakdown_fields: tuple[str, ...] = ()
    origin: str = ""

    def load(self, annotations_dir: str, unreadable: list[RecordError] | None = None) -> list[Record]:
        """The benchmark's records. With ``unreadable`` given, records whose text cannot be read
        (``UnreadableRecord``: not UTF-8, not JSON, too deep, lone surrogates) are collected there
        and left out; any other bad record raises."""
        path = os.path.join(annotations_dir, self.annotation)
        records = load_records(path, unreadable, UnreadableRecord)
        return [self.adapt(r) for r in records] if self.adapt else records

    def build_prompt(self, record: Record, style: str) -> str:
        """The exact user text for ``record`` (media placeholders as the record has them)."""
        from ..data.prompt import BENCHMARK_PROMPT

        return (self.prompt or BENCHMARK_PROMPT)(record, style)

    def score_response(
        self,
        record: Record,
        response: str,
        *,
        reward_config: RewardConfig | None = None,
        response_length: int | None = None,
    ) -> dict[str, Any]:
        """One sample's result: ``accuracy`` and ``extracted`` when scored; ``scored: False`` and
        ``not_scored_reason`` when the official metric needs a judge and none is configured."""
        from .scoring import score_generic

        fn = self.scorer or score_generic
        return fn(record, response, reward_config, response_length)

    def aggregate(self, rows: list[Scored]) -> dict[str, Any]:
        """The official numbers over scored samples; judge-less samples are excluded and counted.

        Failures (``failed: True``, accuracy 0) stay in and count as wrong. With no scored sample
        at all the headline is None (not 0: nothing was measured). The headline's 95% interval,
        clustered by video (``uncertainty.py``), comes with it: ``stderr``, ``stderr_clustered``,
        ``ci95``, ``n_clusters``, and ``ci95_reason`` where there is no interval.
        """
        scored = [(rec, res) for rec, res in rows if res.get("scored") is not False]
        skipped = [res for _, res in rows if res.get("scored") is False]
        out = dict(self.aggregator(scored))
        if isinstance(self.aggregator, Aggregation):
            out.update(self.aggregator.interval(scored))
        else:
            out.update(no_interval("the benchmark's own aggregation names no per-sample mean"))
        if not scored:
            out["score"] = None
        out["not_scored"] = len(skipped)
        if skipped:
            reasons = Counter(str(res.get("not_scored_reason", "unknown")) for res in skipped)
            out["not_scored_reasons"] = dict(sorted(reasons.items()))
        for name in PROXIES:
            values = [float(res[name]) for _, res in rows if isinstance(res.get(name), (int, float))]
            if values:
                out[f"{name}_proxy"] = sum(values) / len(values)
        return out


class UnknownBenchmarkError(UnknownNameError):
    """A benchmark name that neither a built-in nor a loaded spec file answers to."""


# built-ins register themselves when `specs` is imported (on the first lookup); spec files at run time
BENCHMARKS: Registry[BenchmarkSpec] = Registry(
    "benchmark",
    builtins=("easyvideor1.evaluation.specs",),
    error=UnknownBenchmarkError,
    how_to_add="Add one with --benchmark-file SPEC.yaml, or evaluate a records file with --data",
)


def register_benchmark(spec: BenchmarkSpec) -> BenchmarkSpec:
    """Add ``spec`` under its name; a name (in any spelling) already taken is an error."""
    if spec.name in BENCHMARKS:
        raise UserError(f"benchmark {spec.name!r} is registered twice")
    return BENCHMARKS.register(spec.name, spec)


def get_benchmark(name: str) -> BenchmarkSpec:
    """The benchmark ``name`` (any spelling: ``MLVU_dev`` is ``mlvu-dev``); raises
    :class:`UnknownBenchmarkError` naming the closest and all known benchmarks."""
    return BENCHMARKS.get(name)


def list_benchmarks() -> list[str]:
    """Sorted names of the registered benchmarks (built-ins and loaded spec files)."""
    return BENCHMARKS.names()
