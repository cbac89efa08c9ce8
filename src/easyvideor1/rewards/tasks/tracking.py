"""Tracking: mean box IoU over every ground-truth second; a missing predicted box counts 0."""

from __future__ import annotations

from easyvideor1.rewards.geometry import BoxSpace, mean_track_iou, parse_box, parse_box_track
from easyvideor1.rewards.registry import register_task
from easyvideor1.rewards.sample import GroundTruthError, Sample, TaskScore
from easyvideor1.rewards.tasks.temporal_grounding import read_answer_json


@register_task(
    "tracking",
    aliases=("object tracking", "sot", "single object tracking"),
    instruction=(
        'Give the object\'s box at each second as {"boxes": {"second": [x1, y1, x2, y2], ...}} '
        "inside <answer></answer>."
    ),
)
def score_tracking(sample: Sample) -> TaskScore:
    """Mean IoU over the ground-truth seconds, in [0, 1]."""
    truth = sample.truth_json()
    truth_track = parse_box_track(truth.get("boxes") if isinstance(truth, dict) else None)
    if not truth_track:
        raise GroundTruthError(f"tracking ground truth has no boxes dict: {sample.truth[:200]!r}")
    value = read_answer_json(sample.answer)
    predicted_track = parse_box_track(value.get("boxes")) if isinstance(value, dict) else None
    space = BoxSpace(sample.meta, sample.config.default_box_format)
    score = mean_track_iou(predicted_track, truth_track, sorted(truth_track), space)
    well_formed = bool(predicted_track) and all(
        parse_box(box) is not None for boxes in predicted_track.values() for box in boxes
    )
    return TaskScore(score, well_formed, None if value is None else str(value)[:500], {"box_iou": score})
