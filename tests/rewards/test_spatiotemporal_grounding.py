"""Spatio-temporal grounding: 0.5 tIoU + 0.5 mean box IoU over the ground-truth seconds."""

from __future__ import annotations

import json

import pytest

STVG_GT = '<answer>{"time": [8.5, 11.2], "boxes": {"9": [0, 0, 10, 10], "10": [0, 0, 10, 10], "11": [0, 0, 10, 10], "12": [0, 0, 10, 10]}}</answer>'
BOX = [0, 0, 10, 10]
HALF = [0, 0, 5, 10]


@pytest.mark.parametrize(
    ("answer", "accuracy"),
    [
        ({"time": [8.5, 11.2], "boxes": {"9": BOX, "10": BOX, "11": BOX}}, 1.0),
        (
            {"time": [8.5, 11.2], "boxes": {"9.0": BOX, "10.0": BOX, "11": BOX}},
            1.0,
        ),  # keys compare as numbers
        # one lucky box no longer earns the full box score: missing seconds count 0
        ({"time": [8.5, 11.2], "boxes": {"10": BOX}}, 0.5 + 0.5 / 3),
        ({"time": [8.5, 11.2], "boxes": {}}, 0.5),
        ({"time": [8.5, 11.2], "boxes": {"9": HALF, "10": BOX, "11": BOX}}, 0.5 + 0.5 * (2.5 / 3)),
        (
            {"time": [8.5, 11.2], "boxes": {"9": BOX, "9.0": HALF, "10": BOX, "11": BOX}},
            0.5 + 0.5 * (2.5 / 3),
        ),
        ({"time": [8.5, 11.2], "boxes": {"9": [10, 10, 0, 0], "10": BOX, "11": BOX}}, 0.5 + 0.5 * (2 / 3)),
        ({"time": [11.2, 8.5], "boxes": {"9": BOX, "10": BOX, "11": BOX}}, 0.5),  # invalid span
        ({"boxes": {"9": BOX, "10": BOX, "11": BOX}}, 0.5),
        ({"time": [8.5, 11.2], "boxes": {"9": BOX, "10": BOX, "11": BOX, "12": BOX, "30": BOX}}, 1.0),
    ],
)
def test_spatiotemporal_grounding(score, answer, accuracy: float) -> None:
    result = score(f"<answer>{json.dumps(answer)}</answer>", STVG_GT, "spatial-temporal grounding")
    assert result["accuracy"] == pytest.approx(accuracy)


def test_spatiotemporal_without_ground_truth_boxes_uses_tiou(score) -> None:
    gt = '<answer>{"time": [1.0, 3.0], "boxes": {}}</answer>'
    assert score('<answer>{"time": [2.0, 3.0], "boxes": {}}</answer>', gt, "stvg")[
        "accuracy"
    ] == pytest.approx(0.5)
