"""IoU and tIoU: hand-checked values, validation, and properties (hypothesis)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from easyvideor1.rewards.geometry import (
    BoxSpace,
    box_iou,
    parse_box,
    parse_box_track,
    parse_span,
    parse_span_text,
    temporal_iou,
)

coordinate = st.floats(min_value=-1e4, max_value=1e4, allow_nan=False, allow_infinity=False)


@st.composite
def spans(draw):
    start = draw(coordinate)
    length = draw(st.floats(min_value=1e-3, max_value=1e4))
    return (start, start + length)


@st.composite
def boxes(draw):
    x1, y1 = draw(coordinate), draw(coordinate)
    width = draw(st.floats(min_value=1e-2, max_value=1e4))
    height = draw(st.floats(min_value=1e-2, max_value=1e4))
    return (x1, y1, x1 + width, y1 + height)


@given(spans(), spans())
def test_tiou_bounds_and_symmetry(a, b) -> None:
    value = temporal_iou(a, b)
    assert 0.0 <= value <= 1.0
    assert value == pytest.approx(temporal_iou(b, a), abs=1e-12)


@given(spans())
def test_tiou_identity(a) -> None:
    assert temporal_iou(a, a) == pytest.approx(1.0)


@given(boxes(), boxes())
def test_iou_bounds_and_symmetry(a, b) -> None:
    value = box_iou(a, b)
    assert 0.0 <= value <= 1.0
    assert value == pytest.approx(box_iou(b, a), abs=1e-12)


@given(boxes())
def test_iou_identity(a) -> None:
    assert box_iou(a, a) == pytest.approx(1.0)


@given(st.lists(st.one_of(coordinate, st.just(math.nan), st.just(math.inf)), min_size=4, max_size=4), boxes())
def test_iou_of_any_parsed_box_is_bounded(raw, other) -> None:
    box = parse_box(raw)
    assert box is None or 0.0 <= box_iou(box, other) <= 1.0


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ((0, 10), (0, 10), 1.0),
        ((0, 10), (5, 15), 5 / 15),
        ((0, 10), (10, 20), 0.0),
        ((0, 10), (20, 30), 0.0),
        ((0, 10), (2, 4), 0.2),
    ],
)
def test_tiou_values(a, b, expected) -> None:
    assert temporal_iou(a, b) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ((0, 0, 10, 10), (0, 0, 10, 10), 1.0),
        ((0, 0, 10, 10), (5, 0, 15, 10), 50 / 150),
        ((0, 0, 10, 10), (10, 10, 20, 20), 0.0),
        ((0, 0, 10, 10), (2, 2, 4, 4), 0.04),
    ],
)
def test_iou_values(a, b, expected) -> None:
    assert box_iou(a, b) == pytest.approx(expected)


@pytest.mark.parametrize(
    "value",
    [
        [5, 3],
        [3, 3],
        [1],
        [1, 2, 3],
        ["a", 2],
        [math.nan, 2],
        [0, math.inf],
        [True, 2],
        None,
        "1,2",
        {"time": [4, 1]},
    ],
)
def test_invalid_spans(value) -> None:
    assert parse_span(value) is None


@pytest.mark.parametrize(
    "value",
    [[10, 10, 0, 20], [0, 20, 10, 10], [0, 0, 0, 5], [0, 0, 1], [0, 0, 1, 2, 3], [0, 0, "x", 1], [0, 0, math.nan, 1],
     [0, 0, 1, math.inf], [False, 0, 1, 1], "0,0,1,1", None],
)  # fmt: skip
def test_invalid_boxes(value) -> None:
    assert parse_box(value) is None


@pytest.mark.parametrize(
    ("text", "span"),
    [
        ("from 3.2 to 7 seconds", (3.2, 7.0)),
        ("3-7s", (3.0, 7.0)),
        ("between 1.5s and 4.5s", (1.5, 4.5)),
        ("12.0 – 15.5 seconds", (12.0, 15.5)),
        ("from 7 to 3 seconds", None),
        ("3-7s or 10-12s", None),
        ("no time here", None),
    ],
)
def test_span_text(text: str, span) -> None:
    assert parse_span_text(text) == span


def test_track_keys_compare_as_numbers() -> None:
    track = parse_box_track({"9": [0, 0, 1, 1], "9.0": [0, 0, 2, 2], "x": [0, 0, 1, 1], "10": [0, 0, 1, 1]})
    assert track == {9.0: [[0, 0, 1, 1], [0, 0, 2, 2]], 10.0: [[0, 0, 1, 1]]}


@pytest.mark.parametrize(
    ("meta", "predicted", "truth", "expected"),
    [
        ({}, (0, 0, 10, 10), (0, 0, 10, 10), 1.0),  # pixel vs pixel
        (
            {"box_format": "normalized", "gt_box_format": "pixel", "width": 200, "height": 100},
            (0, 0, 0.5, 0.5),
            (0, 0, 100, 50),
            1.0,
        ),
        (
            {"box_format": "grid1000", "gt_box_format": "pixel", "width": 200, "height": 100},
            (0, 0, 500, 500),
            (0, 0, 100, 50),
            1.0,
        ),
        ({"box_format": "qwen3-vl", "gt_box_format": "normalized"}, (0, 0, 500, 1000), (0, 0, 0.5, 1.0), 1.0),
        ({"width": 100, "height": 100}, (200, 200, 300, 300), (0, 0, 100, 100), 0.0),  # outside the frame
        ({"width": 100, "height": 100}, (50, 50, 300, 300), (50, 50, 100, 100), 1.0),  # clipped to the frame
        ({"box_format": "normalized"}, (0.5, 0.5, 2.0, 2.0), (0.5, 0.5, 1.0, 1.0), 1.0),
    ],
)
def test_box_conventions(meta, predicted, truth, expected) -> None:
    assert BoxSpace(meta, "pixel").iou(predicted, truth) == pytest.approx(expected)


def test_box_conventions_need_the_frame_size() -> None:
    with pytest.raises(ValueError, match="width and height"):
        BoxSpace({"box_format": "normalized", "gt_box_format": "pixel"}, "pixel")
    with pytest.raises(ValueError, match="unknown box_format"):
        BoxSpace({"box_format": "inches"}, "pixel")
