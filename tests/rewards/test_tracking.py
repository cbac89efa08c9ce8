"""Tracking: mean IoU over ground-truth seconds, and malformed grounding ground truths."""

from __future__ import annotations

import json

import pytest

from easyvideor1.rewards import GroundTruthError

BOX = [0, 0, 10, 10]
HALF = [0, 0, 5, 10]


TRACK_GT = '{"boxes": {"1": [0, 0, 10, 10], "2": [0, 0, 10, 10], "3": [0, 0, 10, 10], "4": [0, 0, 10, 10]}}'


@pytest.mark.parametrize(
    ("boxes", "accuracy", "format_score"),
    [
        ({"1": BOX, "2": BOX, "3": BOX, "4": BOX}, 1.0, 1.0),
        ({"1": BOX}, 0.25, 1.0),
        ({"1.0": BOX, "2": BOX, "3": HALF, "4": BOX}, 0.875, 1.0),
        ({"1": BOX, "2": BOX, "3": BOX, "4": [5, 5, 5, 5]}, 0.75, 0.5),
        ({}, 0.0, 0.5),
        ({"5": BOX, "6": BOX}, 0.0, 1.0),
    ],
)
def test_tracking(score, boxes, accuracy: float, format_score: float) -> None:
    result = score(f"<answer>{json.dumps({'boxes': boxes})}</answer>", TRACK_GT, "tracking")
    assert result["accuracy"] == pytest.approx(accuracy)
    assert result["format"] == format_score


@pytest.mark.parametrize("problem_type", ["temporal grounding", "spatial grounding", "stvg", "tracking"])
def test_unparseable_ground_truth_is_an_error(score, problem_type: str) -> None:

    with pytest.raises(GroundTruthError):
        score("<answer>{}</answer>", "<answer>not json</answer>", problem_type)
