"""Aggregation of per-sample scores into a benchmark's official numbers and breakdowns.

Every function takes the scored samples of one benchmark: ``(record, result)`` pairs where
``result`` is what :func:`easyvideor1.rewards.compute_score` returned (``accuracy`` in [0, 1],
plus task details such as ``tiou``). Samples that failed (undecodable video, failed request) are
passed with ``accuracy`` 0, so they count as wrong: denominators never shrink. Samples a judge-based
metric could not score (``scored: False``) are removed by ``BenchmarkSpec.aggregate`` before these
run, and counted there.

Each function returns an :class:`Aggregation`: the numbers, plus what a 95% interval of the headline
rests on (``uncertainty.py``): the per-sample value the headline is the mean of, or why it is not
such a mean (a macro average over groups, a count over questions split into binary pairs), and the
breakdowns whose groups are mean accuracies (an interval per group).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from ..data.records import Record
from ..rewards.parsing import parse_ground_truth
from .uncertainty import mean_interval, no_interval, video_clusters

Scored = tuple[Record, dict[str, Any]]
MACRO = "a macro average over groups, not a mean over samples (each group's interval is in ci95_breakdowns)"


def sample_accuracy(result: dict[str, Any]) -> float:
    return float(result["accuracy"])


@dataclass(frozen=True)
class Aggregation:
    """How scored samples become a benchmark's numbers, and what an interval of its headline rests on.

    Attributes:
        numbers: Scored samples -> ``{"score": ..., breakdowns...}`` (calling the aggregation calls it).
        sample_value: The per-sample number (from its result) whose mean over the samples is the
            headline; None when the headline is no such mean: then it gets no interval.
        why_not: Why the headline gets no interval (with ``sample_value`` None).
        groups: Breakdown name -> the record's group; each group's number is its samples' mean
            accuracy, and gets an interval in ``ci95_breakdowns``.
    """

    numbers: Callable[[list[Scored]], dict[str, Any]]
    sample_value: Callable[[dict[str, Any]], float] | None = sample_accuracy
    why_not: str = ""
    groups: dict[str, Callable[[Record], str]] = field(default_factory=dict)

    def __call__(self, rows: list[Scored]) -> dict[str, Any]:
        return self.numbers(rows)

    def interval(self, rows: list[Scored]) -> dict[str, Any]:
        """The headline's ``uncertainty.INTERVAL_KEYS`` and ``ci95_breakdowns`` (name -> group ->
        [lo, hi], None where the group has under two samples or one video)."""
        clusters = video_clusters([rec for rec, _ in rows])
        if self.sample_value is None:
            out = no_interval(self.why_not, len(set(clusters)))
        else:
            out = mean_interval([self.sample_value(res) for _, res in rows], clusters)
        per_group: dict[str, dict[str, list[float] | None]] = {}
        for name, key in self.groups.items():
            members: dict[str, list[int]] = defaultdict(list)
            for k, (rec, _) in enumerate(rows):
                members[key(rec)].append(k)
            per_group[name] = {
                g: mean_interval([sample_accuracy(rows[k][1]) for k in ks], [clusters[k] for k in ks])["ci95"]
                for g, ks in sorted(members.items())
            }
        return {**out, "ci95_breakdowns": per_group}


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


def plain_accuracy() -> Aggregation:
    """Score = mean accuracy over samples."""
    return Aggregation(lambda rows: {"score": accuracy(rows)})


def micro_with_breakdown(key: Callable[[Record], str], name: str) -> Aggregation:
    """Score = mean over samples; breakdown = mean per group (e.g. Video-MME by duration)."""
    return several_breakdowns(**{name: key})


def macro_over(key: Callable[[Record], str], name: str) -> Aggregation:
    """Score = unweighted mean of the per-group means (VSI-Bench over task types, MVBench over tasks)."""

    def aggregate(rows: list[Scored]) -> dict:
        per = {g: accuracy(r) for g, r in _groups(rows, key).items()}
        return {"score": _mean(per.values()), "micro": accuracy(rows), name: per}

    return Aggregation(aggregate, None, MACRO, {name: key})


def _multi_binary(rows: list[Scored]) -> dict:
    """VideoMathQA: the multiple-choice score over five-option questions, and the multi-binary score,
    where a question split into binary pairs (records sharing a ``problem_id``) counts only if every
    pair is right."""
    mcq = [(rec, res) for rec, res in rows if "mbinary_id" not in rec.extra]
    binary = [(rec, res) for rec, res in rows if "mbinary_id" in rec.extra]
    groups = _groups(binary, lambda r: r.problem_id)
    mbin = _mean(float(all(res["accuracy"] >= 1.0 for _, res in g)) for g in groups.values())
    return {"score": mbin, "mbin": mbin, "mcq": accuracy(mcq), "mbin_questions": len(groups)}


multi_binary = Aggregation(
    _multi_binary,
    None,
    "multi-binary accuracy counts a question split into binary pairs only if every pair is right: "
    "not a mean over samples",
)


def _tiou(result: dict[str, Any]) -> float:
    return float(result.get("tiou", result["accuracy"]))


def temporal_recall(thresholds: tuple[float, ...] = (0.3, 0.5, 0.7)) -> Aggregation:
    """Charades-STA: mean tIoU and recall at tIoU thresholds (R@0.3/0.5/0.7)."""

    def aggregate(rows: list[Scored]) -> dict:
        tious = [_tiou(res) for _, res in rows]
        out = {"score": _mean(tious), "miou": _mean(tious)}
        for t in thresholds:
            out[f"R@{t}"] = _mean(float(x >= t) for x in tious)
        return out

    return Aggregation(aggregate, _tiou)


def _gt_has_boxes(rec: Record) -> bool:
    try:
        gt = json.loads(parse_ground_truth(rec.answer))
    except ValueError:
        return False
    return isinstance(gt, dict) and bool(gt.get("boxes"))


def _spatio_temporal(rows: list[Scored]) -> dict:
    """STVG: the combined score (0.5 tIoU + 0.5 box IoU over ground-truth seconds) and its parts.

    A record without ground-truth boxes is scored on tIoU alone, so the box IoU averages over the
    records that have boxes (a failed sample still counts 0)."""
    boxed = [(rec, res) for rec, res in rows if _gt_has_boxes(rec)]
    return {
        "score": accuracy(rows),
        "m_tiou": _mean(float(res.get("tiou", 0.0)) for _, res in rows),
        "m_box_iou": _mean(float(res.get("box_iou", 0.0)) for _, res in boxed),
    }


spatio_temporal = Aggregation(_spatio_temporal)


def nested_macro(
    inner: Callable[[Record], str], outer: Callable[[Record], str], names: tuple[str, str]
) -> Aggregation:
    """OVO-Bench: accuracy per task, macro-averaged per category, then over categories."""

    def aggregate(rows: list[Scored]) -> dict:
        per_task = {t: accuracy(r) for t, r in _groups(rows, inner).items()}
        task_category = {inner(rec): outer(rec) for rec, _ in rows}
        per_category: dict[str, list[float]] = defaultdict(list)
        for task, acc in per_task.items():
            per_category[task_category[task]].append(acc)
        categories = {c: _mean(v) for c, v in sorted(per_category.items())}
        return {"score": _mean(categories.values()), names[0]: per_task, names[1]: categories}

    return Aggregation(aggregate, None, MACRO, {names[0]: inner})


def several_breakdowns(**keys: Callable[[Record], str]) -> Aggregation:
    """Micro accuracy with several independent breakdowns (e.g. LiveSports by question type and OCR)."""
    return with_breakdowns(plain_accuracy(), **keys)


def with_breakdowns(head: Aggregation, **keys: Callable[[Record], str]) -> Aggregation:
    """``head``'s numbers plus the mean accuracy per group of each breakdown ``name=key``."""

    def aggregate(rows: list[Scored]) -> dict:
        out = head(rows)
        for name, key in keys.items():
            out[name] = {g: accuracy(r) for g, r in _groups(rows, key).items()}
        return out

    return replace(head, numbers=aggregate, groups={**head.groups, **keys})
