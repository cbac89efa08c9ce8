"""Aggregation of per-sample scores into a benchmark's official numbers and breakdowns.

Every function takes the scored samples of one benchmark: ``(record, result)`` pairs where
``result`` is what :func:`easyvideor1.rewards.compute_score` returned (``accuracy`` in [0, 1],
plus task details such as ``tiou``). Samples that failed (undecodable video, failed request) are
passed with ``accuracy`` 0, so they count as wrong: denominators never shrink. Samples a judge-based
metric could not score (``scored: False``) are removed by ``BenchmarkSpec.aggregate`` before these
run, and counted there.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from ..data.records import Record
from ..rewards.parsing import parse_ground_truth

Scored = tuple[Record, dict[str, Any]]


def _mean(values: Iterable[float]) -> float:
    values = list(values)
    return sum(values) / len(values) if values else 0.0


def _groups(rows: list[Scored], key: Callable[[Record], str]) -> dict[str, list[Scored]]:
    out: dict[str, list[Scored]] = defaultdict(list)
    for rec, res in rows:
        out[key(rec)].append((rec, res))
    return dict(sorted(out.items()))


def accuracy(rows: list[Scored]) -> float:
    return _mean(float(res["accuracy"]) for _, res in rows)


def micro_with_breakdown(key: Callable[[Record], str], name: str) -> Callable[[list[Scored]], dict]:
    """Score = mean over samples; breakdown = mean per group (e.g. Video-MME by duration)."""

    def aggregate(rows: list[Scored]) -> dict:
        return {"score": accuracy(rows), name: {g: accuracy(r) for g, r in _groups(rows, key).items()}}

    return aggregate


def macro_over(key: Callable[[Record], str], name: str) -> Callable[[list[Scored]], dict]:
    """Score = unweighted mean of the per-group means (VSI-Bench over task types, MVBench over tasks)."""

    def aggregate(rows: list[Scored]) -> dict:
        per = {g: accuracy(r) for g, r in _groups(rows, key).items()}
        return {"score": _mean(per.values()), "micro": accuracy(rows), name: per}

    return aggregate


def multi_binary(rows: list[Scored]) -> dict:
    """VideoMathQA: the multiple-choice score over five-option questions, and the multi-binary score,
    where a question split into binary pairs (records sharing a ``problem_id``) counts only if every
    pair is right."""
    mcq = [(rec, res) for rec, res in rows if "mbinary_id" not in rec.extra]
    binary = [(rec, res) for rec, res in rows if "mbinary_id" in rec.extra]
    groups = _groups(binary, lambda r: r.problem_id)
    mbin = _mean(float(all(res["accuracy"] >= 1.0 for _, res in g)) for g in groups.values())
    return {"score": mbin, "mbin": mbin, "mcq": accuracy(mcq), "mbin_questions": len(groups)}


def temporal_recall(thresholds: tuple[float, ...] = (0.3, 0.5, 0.7)) -> Callable[[list[Scored]], dict]:
    """Charades-STA: mean tIoU and recall at tIoU thresholds (R@0.3/0.5/0.7)."""

    def aggregate(rows: list[Scored]) -> dict:
        tious = [float(res.get("tiou", res["accuracy"])) for _, res in rows]
        out = {"score": _mean(tious), "miou": _mean(tious)}
        for t in thresholds:
            out[f"R@{t}"] = _mean(float(x >= t) for x in tious)
        return out

    return aggregate


def _gt_has_boxes(rec: Record) -> bool:
    try:
        gt = json.loads(parse_ground_truth(rec.answer))
    except ValueError:
        return False
    return isinstance(gt, dict) and bool(gt.get("boxes"))


def spatio_temporal(rows: list[Scored]) -> dict:
    """STVG: the combined score (0.5 tIoU + 0.5 box IoU over ground-truth seconds) and its parts.

    A record without ground-truth boxes is scored on tIoU alone, so the box IoU averages over the
    records that have boxes (a failed sample still counts 0)."""
    boxed = [(rec, res) for rec, res in rows if _gt_has_boxes(rec)]
    return {
        "score": accuracy(rows),
        "m_tiou": _mean(float(res.get("tiou", 0.0)) for _, res in rows),
        "m_box_iou": _mean(float(res.get("box_iou", 0.0)) for _, res in boxed),
    }


def nested_macro(inner: Callable[[Record], str], outer: Callable[[Record], str], names: tuple[str, str]):
    """OVO-Bench: accuracy per task, macro-averaged per category, then over categories."""

    def aggregate(rows: list[Scored]) -> dict:
        per_task = {t: accuracy(r) for t, r in _groups(rows, inner).items()}
        task_category = {inner(rec): outer(rec) for rec, _ in rows}
        per_category: dict[str, list[float]] = defaultdict(list)
        for task, acc in per_task.items():
            per_category[task_category[task]].append(acc)
        categories = {c: _mean(v) for c, v in sorted(per_category.items())}
        return {"score": _mean(categories.values()), names[0]: per_task, names[1]: categories}

    return aggregate


def several_breakdowns(**keys: Callable[[Record], str]) -> Callable[[list[Scored]], dict]:
    """Micro accuracy with several independent breakdowns (e.g. LiveSports by question type and OCR)."""

    def aggregate(rows: list[Scored]) -> dict:
        out: dict[str, Any] = {"score": accuracy(rows)}
        for name, key in keys.items():
            out[name] = {g: accuracy(r) for g, r in _groups(rows, key).items()}
        return out

    return aggregate
