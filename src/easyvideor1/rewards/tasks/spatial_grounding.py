"""Spatial grounding: IoU of the stated box with the ground-truth box.

Accepted answers: `{"boxes": [x1, y1, x2, y2]}` (also "box", "bbox", "bbox_2d"), a bare 4-number
list, or Qwen's `[{"bbox_2d": [...], "label": ...}]` with a single entry. Several boxes, NaN,
infinities and x1 >= x2 or y1 >= y2 make the box invalid (IoU 0). The coordinate convention is the
record's `box_format` (default `RewardConfig.default_box_format`, "pixel"); see `geometry.BoxSpace`.
"""

from __future__ import annotations

from typing import Any

from easyvideor1.rewards.geometry import BoxSpace, parse_box
from easyvideor1.rewards.registry import register_task
from easyvideor1.rewards.sample import GroundTruthError, Sample, TaskScore
from easyvideor1.rewards.tasks.temporal_grounding import read_answer_json

_BOX_KEYS = ("boxes", "box", "bbox", "bbox_2d")


def raw_box(value: Any) -> Any | None:
    """The one box a JSON answer states (not yet validated), or None."""
    if isinstance(value, dict):
        key = next((key for key in _BOX_KEYS if key in value), None)
        return raw_box(value[key]) if key else None
    if isinstance(value, list):
        if len(value) == 4 and not any(isinstance(v, (list, dict)) for v in value):
            return value
        if len(value) == 1:
            return raw_box(value[0])
    return None


@register_task(
    "spatial_grounding",
    aliases=(
        "spatial grounding",
        "referring expression",
        "rec grounding",
        "visual grounding",
        "box grounding",
    ),
    instruction='Give the box as {"boxes": [x1, y1, x2, y2]} inside <answer></answer>.',
)
def score_spatial_grounding(sample: Sample) -> TaskScore:
    """Box IoU in [0, 1]."""
    truth = parse_box(raw_box(sample.truth_json()))
    if truth is None:
        raise GroundTruthError(f"spatial grounding ground truth has no valid box: {sample.truth[:200]!r}")
    space = BoxSpace(sample.meta, sample.config.default_box_format)
    predicted = parse_box(raw_box(read_answer_json(sample.answer)))
    if predicted is None:
        return TaskScore(0.0, False, None, {"box_iou": 0.0})
    iou = space.iou(predicted, truth)
    return TaskScore(iou, True, "[" + ", ".join(f"{v:g}" for v in predicted) + "]", {"box_iou": iou})
