"""Spatio-temporal grounding: 0.5 * tIoU + 0.5 * mean box IoU over the ground-truth seconds.

The box term averages over the ground-truth boxes whose second lies inside the ground-truth span; a
missing predicted box counts 0, so a single lucky box no longer earns the full box score. Second
keys compare as numbers ("9" == "9.0"). A ground truth without boxes in its span (71 ST-Align
records) is scored by tIoU alone, as the published evaluation does.
"""

from __future__ import annotations

from easyvideor1.rewards.geometry import (
    BoxSpace,
    mean_track_iou,
    parse_box,
    parse_box_track,
    parse_span,
    temporal_iou,
)
from easyvideor1.rewards.registry import register_task
from easyvideor1.rewards.sample import GroundTruthError, Sample, TaskScore
from easyvideor1.rewards.tasks.temporal_grounding import read_answer_json, truth_span

TIME_WEIGHT = 0.5


@register_task(
    "spatiotemporal_grounding",
    aliases=(
        "spatial-temporal grounding",
        "spatio-temporal grounding",
        "spatial temporal grounding",
        "stvg",
        "st grounding",
    ),
    instruction=(
        'Give the time span and the object\'s box at each second of it as {"time": [start_seconds, '
        'end_seconds], "boxes": {"second": [x1, y1, x2, y2], ...}} inside <answer></answer>.'
    ),
)
def score_spatiotemporal_grounding(sample: Sample) -> TaskScore:
    """0.5 tIoU + 0.5 mean box IoU (tIoU alone when the ground truth has no boxes in its span)."""
    truth = sample.truth_json()
    if not isinstance(truth, dict):
        raise GroundTruthError(f"spatio-temporal ground truth is not a JSON object: {sample.truth[:200]!r}")
    start, end = span = truth_span(sample)
    truth_track = parse_box_track(truth.get("boxes", {}))
    if truth_track is None:
        raise GroundTruthError(f"spatio-temporal ground truth boxes are not a dict: {sample.truth[:200]!r}")
    seconds = sorted(second for second in truth_track if start <= second <= end)
    value = read_answer_json(sample.answer)
    predicted_span = parse_span(value) if isinstance(value, dict) else None
    predicted_track = parse_box_track(value.get("boxes")) if isinstance(value, dict) else None
    tiou = temporal_iou(predicted_span, span) if predicted_span else 0.0
    space = BoxSpace(sample.meta, sample.config.default_box_format)
    box_score = mean_track_iou(predicted_track, truth_track, seconds, space)
    accuracy = TIME_WEIGHT * tiou + (1 - TIME_WEIGHT) * box_score if seconds else tiou
    well_formed = (
        predicted_span is not None
        and predicted_track is not None
        and all(parse_box(box) is not None for boxes in predicted_track.values() for box in boxes)
    )
    prediction = None if value is None else str(value)[:500]
    return TaskScore(accuracy, well_formed, prediction, {"tiou": tiou, "box_iou": box_score})
