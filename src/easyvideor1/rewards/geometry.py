"""Intervals and boxes: validation, coordinate conventions, tIoU and IoU (always in [0, 1]).

Validation is strict and deterministic: a time span needs two finite numbers with start < end; a
box needs four finite numbers with x1 < x2 and y1 < y2. Swapped coordinates, NaN, infinities,
booleans and wrong lengths make the value invalid (it scores 0) rather than being repaired: an
[x, y, w, h] box read as [x1, y1, x2, y2] would be "repaired" into a wrong box.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from easyvideor1.rewards.json_text import finite_number

from ..errors import UserError

Box = tuple[float, float, float, float]
Span = tuple[float, float]

# Extent of each convention; None means "the source frame size" (pixels).
_EXTENTS: dict[str, float | None] = {"normalized": 1.0, "grid1000": 1000.0, "pixel": None}
_BOX_FORMAT_ALIASES = {
    "pixel": "pixel", "pixels": "pixel", "absolute": "pixel", "abs": "pixel",
    "normalized": "normalized", "normalised": "normalized", "relative": "normalized", "0_1": "normalized",
    "grid1000": "grid1000", "qwen3": "grid1000", "qwen3_vl": "grid1000", "0_1000": "grid1000", "1000": "grid1000",
}  # fmt: skip
# Possessive runs (`\d++`, `\s*+`): two optional whitespace runs around an optional unit were
# quadratic on a number followed by a long run of spaces.
_TIME_RANGE_RE = re.compile(
    r"(?<![\w.])(\d++(?:\.\d++)?)\s*+(?:s|sec|secs|seconds)?\s*+(?:-|–|—|~|to|until|and)\s*+"
    r"(\d++(?:\.\d++)?)\s*+(?:s\b|sec\b|secs\b|seconds\b)?",
    re.IGNORECASE,
)


def parse_span(value: Any) -> Span | None:
    """A valid (start, end) from `[s, e]` or `{"time": [s, e]}`, else None."""
    if isinstance(value, Mapping):
        value = value.get("time", value.get("timestamps"))
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        return None
    start, end = finite_number(value[0]), finite_number(value[1])
    if start is None or end is None or not start < end:
        return None
    return start, end


def parse_span_text(text: str) -> Span | None:
    """A time range written in words ("from 3.2 to 7 seconds", "3-7s"); None unless exactly one."""
    spans = {(float(a), float(b)) for a, b in _TIME_RANGE_RE.findall(text)}
    if len(spans) != 1:
        return None
    start, end = spans.pop()
    return (start, end) if start < end else None


def parse_box(value: Any) -> Box | None:
    """A valid (x1, y1, x2, y2) from a 4-number list, else None."""
    if not isinstance(value, (list, tuple)) or len(value) != 4:
        return None
    numbers = [finite_number(v) for v in value]
    if any(n is None for n in numbers):
        return None
    x1, y1, x2, y2 = numbers  # type: ignore[misc]
    if not (x1 < x2 and y1 < y2):
        return None
    return x1, y1, x2, y2


def temporal_iou(a: Span, b: Span) -> float:
    """Intersection over union of two time spans (0 for empty or invalid spans)."""
    length_a, length_b = a[1] - a[0], b[1] - b[0]
    if not (length_a > 0 and length_b > 0):
        return 0.0
    inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    union = length_a + length_b - inter
    return min(1.0, max(0.0, inter / union)) if union > 0 else 0.0


def box_iou(a: Box, b: Box) -> float:
    """Intersection over union of two boxes (0 when either has no area)."""
    area_a = max(0.0, a[2] - a[0]) * max(0.0, a[3] - a[1])
    area_b = max(0.0, b[2] - b[0]) * max(0.0, b[3] - b[1])
    if not (area_a > 0 and area_b > 0):
        return 0.0
    inter = max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = area_a + area_b - inter
    return min(1.0, max(0.0, inter / union)) if union > 0 else 0.0


def normalize_box_format(name: Any, default: str) -> str:
    """Canonical convention name ("pixel", "normalized", "grid1000") of a record's `box_format`."""
    if name is None:
        return default
    key = re.sub(r"[\s\-]+", "_", str(name).strip().lower())
    if key not in _BOX_FORMAT_ALIASES:
        raise UserError(f"unknown box_format {name!r}; use pixel, normalized or grid1000")
    return _BOX_FORMAT_ALIASES[key]


def frame_size(meta: Mapping[str, Any]) -> tuple[float, float] | None:
    """Source frame (width, height) from a record's `width`/`height` (or `frame_width`/`frame_height`)."""
    width = finite_number(meta.get("width", meta.get("frame_width")))
    height = finite_number(meta.get("height", meta.get("frame_height")))
    if width is None or height is None or width <= 0 or height <= 0:
        return None
    return width, height


class BoxSpace:
    """Puts predicted and ground-truth boxes into one coordinate space, clipped to the frame.

    Boxes of the same convention are compared in it directly. Different conventions are mapped
    to normalised coordinates, which needs the frame size for pixels (a record declaring
    conventions it cannot convert is a data error). Clipping keeps boxes inside the frame where its
    extent is known, so a box outside the frame has no area and scores 0.
    """

    def __init__(self, meta: Mapping[str, Any], default_format: str) -> None:
        self.predicted_format = normalize_box_format(meta.get("box_format"), default_format)
        self.truth_format = normalize_box_format(meta.get("gt_box_format"), self.predicted_format)
        self.size = frame_size(meta)
        needs_pixels = self.predicted_format != self.truth_format and "pixel" in (
            self.predicted_format,
            self.truth_format,
        )
        if needs_pixels and self.size is None:
            raise UserError(
                "converting pixel boxes to another box_format needs the record's width and height"
            )

    def _convert(self, box: Box, source: str) -> Box:
        if source == self.truth_format:
            return self._clip(box, source)
        box = self._clip(box, source)
        scale_x, scale_y = self._extent(source)
        target_x, target_y = self._extent(self.truth_format)
        return (
            box[0] / scale_x * target_x,
            box[1] / scale_y * target_y,
            box[2] / scale_x * target_x,
            box[3] / scale_y * target_y,
        )

    def _extent(self, convention: str) -> tuple[float, float]:
        extent = _EXTENTS[convention]
        if extent is None:
            assert self.size is not None
            return self.size
        return extent, extent

    def _clip(self, box: Box, convention: str) -> Box:
        if _EXTENTS[convention] is None and self.size is None:
            return (max(box[0], 0.0), max(box[1], 0.0), box[2], box[3])
        width, height = self._extent(convention)
        return (
            min(max(box[0], 0.0), width),
            min(max(box[1], 0.0), height),
            min(max(box[2], 0.0), width),
            min(max(box[3], 0.0), height),
        )

    def predicted(self, box: Box) -> Box:
        """A predicted box in the ground truth's space."""
        return self._convert(box, self.predicted_format)

    def truth(self, box: Box) -> Box:
        """A ground-truth box, clipped to the frame."""
        return self._clip(box, self.truth_format)

    def iou(self, predicted: Box, truth: Box) -> float:
        """IoU of a predicted and a ground-truth box in the common space."""
        return box_iou(self.predicted(predicted), self.truth(truth))


def parse_box_track(value: Any) -> dict[float, list[Any]] | None:
    """Second -> raw box of a `{"second": box}` dict, keys compared as numbers ("9" == "9.0").

    Keys that are not finite numbers are dropped. Two keys naming the same second keep both boxes
    (the scorer takes the worst, so hedging with duplicates never helps). None if not a dict.
    """
    if not isinstance(value, Mapping):
        return None
    track: dict[float, list[Any]] = {}
    for key, box in value.items():
        second = finite_number(key)
        if second is not None:
            track.setdefault(second, []).append(box)
    return track


def mean_track_iou(
    predicted: dict[float, list[Any]] | None,
    truth: dict[float, list[Any]],
    seconds: list[float],
    space: BoxSpace,
) -> float:
    """Mean IoU over the ground-truth `seconds`; a missing or invalid predicted box counts 0.

    Every ground-truth second weighs the same, so one lucky box among many missing ones earns only
    its share (the published reward averaged over the seconds both sides had).
    """
    if not seconds:
        return 0.0
    total = 0.0
    for second in seconds:
        truth_box = parse_box(truth[second][0])
        if truth_box is None:
            raise UserError(f"invalid ground-truth box at second {second:g}: {truth[second][0]!r}")
        candidates = (predicted or {}).get(second, [])
        boxes = [parse_box(box) for box in candidates]
        if boxes and all(box is not None for box in boxes):
            total += min(space.iou(box, truth_box) for box in boxes)  # type: ignore[arg-type]
    return total / len(seconds)
