"""Temporal grounding: tIoU of the stated `{"time": [start, end]}` with the ground-truth span.

The span may also be a bare `[start, end]` or a phrase ("from 3.2 to 7 seconds", "3-7s"). A span
needs start < end and finite numbers, otherwise it scores 0 (no repair).
"""

from __future__ import annotations

from typing import Any

from easyvideor1.rewards.geometry import Span, parse_span, parse_span_text, temporal_iou
from easyvideor1.rewards.json_text import find_json
from easyvideor1.rewards.parsing import ExtractedAnswer
from easyvideor1.rewards.registry import register_task
from easyvideor1.rewards.sample import GroundTruthError, Sample, TaskScore


def read_answer_json(answer: ExtractedAnswer) -> Any | None:
    """The JSON value of an extracted answer, or None."""
    if answer.text is None or answer.ambiguous:
        return None
    return find_json(answer.text)


def truth_span(sample: Sample) -> Span:
    """The ground-truth span; raises `GroundTruthError` when missing or invalid."""
    span = parse_span(sample.truth_json())
    if span is None:
        raise GroundTruthError(f"{sample.task} ground truth has no valid time span: {sample.truth[:200]!r}")
    return span


@register_task(
    "temporal_grounding",
    aliases=("temporal grounding", "moment retrieval", "video grounding", "tvg"),
    instruction='Give the time span as {"time": [start_seconds, end_seconds]} inside <answer></answer>.',
)
def score_temporal_grounding(sample: Sample) -> TaskScore:
    """tIoU in [0, 1]."""
    truth = truth_span(sample)
    value = read_answer_json(sample.answer)
    predicted = parse_span(value) if value is not None else None
    if value is None and sample.answer.text and not sample.answer.ambiguous:
        predicted = parse_span_text(sample.answer.text)
    if predicted is None:
        return TaskScore(0.0, False, None, {"tiou": 0.0})
    tiou = temporal_iou(predicted, truth)
    well_formed = isinstance(value, dict) and parse_span(value) is not None
    return TaskScore(tiou, well_formed, f"[{predicted[0]:g}, {predicted[1]:g}]", {"tiou": tiou})
