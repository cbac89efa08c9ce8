"""A benchmark's ``results.json``: the official metric and breakdowns, plus what the number rests on.

Every sample of the benchmark is in the denominator: a sample with no usable row counts as
missing (``evaluated`` < ``samples``), a failed one as wrong. Rows are re-scored when the reward
config changed since they were written (see ``rows.py``), so the numbers always follow the
current scorer settings. Besides the metric: failures, answers the scorer could not extract,
responses cut at the token limit, samples a judge-based metric could not score, duplicated
``problem_id``s in the annotation file, unreadable lines of ``predictions.jsonl`` and records of
the annotation file left out because their text cannot be read (not UTF-8, lone surrogates, ...).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Any

from ..outdir import replacing
from ..rewards import RewardConfig
from .identity import duplicate_problem_ids
from .predictions import read_predictions
from .rows import prompt_sha, rescore

if TYPE_CHECKING:
    from .inputs import BenchmarkInputs


def scored_pairs(
    inputs: BenchmarkInputs, rows: dict[str, dict], reward: RewardConfig | None
) -> list[tuple[Any, dict]]:
    """(record, row) for every sample with a row made for its current prompt, re-scored if stale."""
    pairs = []
    for rec, sid, prompt in zip(inputs.records, inputs.ids, inputs.prompts, strict=True):
        row = rows.get(sid)
        if row is not None and row.get("prompt_sha") == prompt_sha(prompt):
            pairs.append((rec, rescore(inputs.spec, rec, row, reward)))
    return pairs


def summarize(
    inputs: BenchmarkInputs, pairs: list[tuple[Any, dict]], skipped_lines: int = 0
) -> dict[str, Any]:
    """The benchmark's numbers from its scored samples (the same for ``eval`` and ``score``)."""
    answered = [row for _, row in pairs if not row.get("failed")]
    return {
        "benchmark": inputs.spec.name,
        "metric": inputs.spec.metric,
        **inputs.spec.aggregate(pairs),
        "samples": len(inputs.records),
        "evaluated": len(pairs),
        "failures": sum(1 for _, row in pairs if row.get("failed")),
        "extraction_failures": sum(
            1 for row in answered if row.get("extracted") is None and row.get("scored", True) is not False
        ),
        "truncated": sum(1 for row in answered if row.get("truncated")),
        "not_scored": sum(1 for row in answered if row.get("scored") is False),
        "duplicate_problem_ids": duplicate_problem_ids(inputs.records),
        "skipped_prediction_lines": skipped_lines,
        "unreadable_records": inputs.unreadable_records,  # left out of `samples` (text not readable)
        **tool_counts(answered),
    }


def tool_counts(rows: list[dict]) -> dict[str, Any]:
    """With tools (rows with an ``episode``): calls per sample, the share of samples that called a
    tool, invalid calls and tool errors; nothing for one-turn rows."""
    episodes = [row["episode"] for row in rows if row.get("episode")]
    if not episodes:
        return {}
    n = len(episodes)
    return {
        "tool_calls_per_sample": round(sum(e["calls"] for e in episodes) / n, 4),
        "tool_call_rate": round(sum(1 for e in episodes if e["calls"]) / n, 4),
        "invalid_calls": sum(e["invalid_calls"] for e in episodes),
        "tool_errors": sum(e["errors"] for e in episodes),
        "episode_finish": {
            k: sum(1 for e in episodes if e["finish"] == k) for k in sorted({e["finish"] for e in episodes})
        },
    }


def write_results(
    inputs: BenchmarkInputs,
    pred_path: str,
    digest: str,
    bench_dir: str,
    seconds: float,
    timing: dict[str, float],
    detail: dict | None = None,
    reward: RewardConfig | None = None,
    probe: str | None = None,
) -> dict[str, Any]:
    found = read_predictions(pred_path, digest)
    results = summarize(inputs, scored_pairs(inputs, found.rows, reward), found.skipped_lines)
    results.update(
        probe=probe,  # None: the real video; blank/shuffle: a video-dependence probe (eval.probe)
        seconds=round(seconds, 2),
        stage_seconds={k: round(v, 2) for k, v in timing.items()},
        settings=digest,
        settings_detail=detail,
    )
    write_json_atomic(os.path.join(bench_dir, "results.json"), results)
    return results


def write_json_atomic(path: str, obj: Any) -> None:
    """Write ``path`` whole or not at all (a reader never sees half a results file)."""
    _write_atomic(path, lambda f: json.dump(obj, f, indent=1))


def write_jsonl_atomic(path: str, rows: list[dict]) -> None:
    """``rows`` as ``path``'s JSON lines, whole or not at all: a scoring that fails half-way leaves
    the previous file (or none), never a partial one beside no ``results.json``."""
    _write_atomic(path, lambda f: f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def _write_atomic(path: str, write) -> None:
    # a full disk is one line naming the file; the previous file stays whole; a link is refused
    with replacing(path) as f:
        write(f)
