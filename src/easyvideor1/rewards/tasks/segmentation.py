"""Segmentation: mask IoU between the stated mask and the ground truth (pycocotools).

Masks are COCO RLE (`{"size": [h, w], "counts": ...}`, compressed string or run list), polygons
(`[[x1, y1, x2, y2, ...], ...]`, which need the record's `height`/`width` or a ground-truth RLE size),
or a box (`{"boxes": [x1, y1, x2, y2]}`, rasterised as a rectangle). A video answer
`{"masks": {"second": mask}}` is scored as the mean IoU over the ground-truth seconds, a missing mask
counting 0. RLE strings are decoded and checked in Python before pycocotools sees them: its C decoder
reads past the end of a malformed string.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from pycocotools import mask as mask_utils

from easyvideor1.rewards.geometry import frame_size, parse_box, parse_box_track
from easyvideor1.rewards.json_text import finite_number
from easyvideor1.rewards.registry import register_task
from easyvideor1.rewards.sample import GroundTruthError, Sample, TaskScore
from easyvideor1.rewards.tasks.temporal_grounding import read_answer_json

_MASK_KEYS = ("mask", "segmentation", "rle", "polygons", "polygon")
_MAX_PIXELS = 8192 * 8192


def _decode_counts(counts: str) -> list[int] | None:
    """Run lengths of a COCO compressed RLE string, or None if malformed (the LEB128-like format)."""
    runs: list[int] = []
    position = 0
    while position < len(counts):
        value, shift, more = 0, 0, True
        while more:
            if position >= len(counts):
                return None
            code = ord(counts[position]) - 48
            if not 0 <= code < 64:
                return None
            value |= (code & 0x1F) << (5 * shift)
            more = bool(code & 0x20)
            position += 1
            shift += 1
            if not more and code & 0x10:
                value |= -1 << (5 * shift)
        if len(runs) > 2:
            value += runs[-2]
        runs.append(value)
    return runs


def _rle(value: Any, size: tuple[int, int] | None) -> dict[str, Any] | None:
    """A compressed RLE for an RLE, polygon list or box answer; None when invalid."""
    if isinstance(value, dict) and "counts" in value:
        shape = value.get("size")
        if not (
            isinstance(shape, list) and len(shape) == 2 and all(isinstance(v, int) and v > 0 for v in shape)
        ):
            return None
        height, width = shape
        if height * width > _MAX_PIXELS or (size is not None and (height, width) != size):
            return None
        counts = value["counts"]
        runs = _decode_counts(counts) if isinstance(counts, str) else counts
        if not isinstance(runs, list) or not all(
            isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in runs
        ):
            return None
        if sum(runs) != height * width:
            return None
        return mask_utils.frPyObjects({"size": [height, width], "counts": runs}, height, width)
    if isinstance(value, dict):
        key = next((key for key in _MASK_KEYS if key in value), None)
        if key:
            return _rle(value[key], size)
        box = parse_box(value.get("boxes", value.get("bbox")))
        if box is not None and size is not None:
            x1, y1, x2, y2 = box
            return _rle([[x1, y1, x2, y1, x2, y2, x1, y2]], size)
        return None
    if isinstance(value, list) and value and size is not None:
        polygons = value if isinstance(value[0], list) else [value]
        for polygon in polygons:
            if not isinstance(polygon, list) or len(polygon) < 6 or len(polygon) % 2:
                return None
            if any(finite_number(v) is None for v in polygon):
                return None
        height, width = size
        return mask_utils.merge(
            mask_utils.frPyObjects([[float(v) for v in p] for p in polygons], height, width)
        )
    return None


def mask_iou(predicted: dict[str, Any] | None, truth: dict[str, Any]) -> float:
    """IoU of two RLE masks of the same size (0 for a missing prediction or two empty masks)."""
    if predicted is None:
        return 0.0
    if mask_utils.area(truth) == 0 and mask_utils.area(predicted) == 0:
        return 0.0
    return float(np.clip(mask_utils.iou([predicted], [truth], [0])[0][0], 0.0, 1.0))


def _size(sample: Sample, truth: Any) -> tuple[int, int] | None:
    if isinstance(truth, dict) and isinstance(truth.get("size"), list) and len(truth["size"]) == 2:
        return int(truth["size"][0]), int(truth["size"][1])
    frame = frame_size(sample.meta)
    return (int(frame[1]), int(frame[0])) if frame else None


@register_task(
    "segmentation",
    aliases=("video segmentation", "image segmentation", "referring segmentation", "mask"),
    instruction=(
        'Give the mask as COCO RLE {"size": [height, width], "counts": "..."} or as polygons '
        "[[x1, y1, x2, y2, ...]] inside <answer></answer>."
    ),
)
def score_segmentation(sample: Sample) -> TaskScore:
    """Mask IoU, or the mean over ground-truth seconds for `{"masks": {...}}` answers."""
    truth_value = sample.truth_json()
    predicted_value = read_answer_json(sample.answer)
    if isinstance(truth_value, dict) and isinstance(truth_value.get("masks"), dict):
        truth_frames = parse_box_track(truth_value["masks"]) or {}
        predicted_frames = (
            parse_box_track(predicted_value.get("masks")) if isinstance(predicted_value, dict) else None
        )
        scores = []
        for second, (truth_mask, *_) in sorted(truth_frames.items()):
            size = _size(sample, truth_mask)
            truth_rle = _rle(truth_mask, size)
            if truth_rle is None:
                raise GroundTruthError(f"invalid ground-truth mask at second {second:g}")
            candidates = (predicted_frames or {}).get(second, [])
            scores.append(min((mask_iou(_rle(m, size), truth_rle) for m in candidates), default=0.0))
        score = sum(scores) / len(scores) if scores else 0.0
        return TaskScore(score, bool(predicted_frames), None, {"mask_iou": score})
    size = _size(sample, truth_value)
    truth_rle = _rle(truth_value, size)
    if truth_rle is None:
        raise GroundTruthError(f"invalid segmentation ground truth: {sample.truth[:200]!r}")
    predicted = _rle(predicted_value, (int(truth_rle["size"][0]), int(truth_rle["size"][1])))
    score = mask_iou(predicted, truth_rle)
    return TaskScore(score, predicted is not None, None, {"mask_iou": score})
