"""Temporal, spatial and spatio-temporal grounding, and tracking."""

from __future__ import annotations

import json

import pytest

from easyvideor1.rewards import RewardConfig

CHARADES_GT = '<think>{"time": [24.296875, 30.40625], "boxes": {}}</think><[PLHD21_never_used_51bce0c785ca2f68081bfa7d91973934]>'


@pytest.mark.parametrize(
    ("response", "accuracy", "format_score"),
    [
        ('<answer>{"time": [24.296875, 30.40625]}</answer>', 1.0, 1.0),
        ('<answer>{"time": [27.3515625, 30.40625]}</answer>', 0.5, 1.0),
        ('<answer>{"time": [30.40625, 24.296875]}</answer>', 0.0, 0.5),  # start > end
        ('<answer>{"time": [24.3, 24.3]}</answer>', 0.0, 0.5),
        ('<answer>{"time": [NaN, 30]}</answer>', 0.0, 0.5),
        ('<answer>{"time": [0, Infinity]}</answer>', 0.0, 0.5),
        ('<answer>{"time": ["a", 30]}</answer>', 0.0, 0.5),
        ('<answer>{"time": [24.3, 30.4}</answer>', 0.0, 0.5),  # malformed JSON
        ('<answer>{"time": [24.3 30.4]}</answer>', 0.0, 0.5),
        ('<answer>{"time": [24.296875, 30.40625], }</answer>', 1.0, 1.0),  # a Python literal is accepted
        ('<answer>{"time": [24.296875]}</answer>', 0.0, 0.5),
        ("<answer>[24.296875, 30.40625]</answer>", 1.0, 0.5),  # bare list: right span, wrong shape
        ("<answer>from 24.296875 to 30.40625 seconds</answer>", 1.0, 0.5),
        ('<answer>```json\n{"time": [24.296875, 30.40625]}\n```</answer>', 1.0, 1.0),
        ("<answer>{'time': [24.296875, 30.40625]}</answer>", 1.0, 1.0),
        ('The event happens at {"time": [24.296875, 30.40625]}', 1.0, 0.0),
        ("It happens from 24.296875 to 30.40625 seconds.", 1.0, 0.0),
        ("", 0.0, 0.0),
        ("<answer>{}</answer>", 0.0, 0.5),
    ],
)
def test_temporal_grounding_charades_quirk(score, response: str, accuracy: float, format_score: float) -> None:
    result = score(response, CHARADES_GT, "temporal grounding")
    assert result["accuracy"] == pytest.approx(accuracy)
    assert result["format"] == format_score
    assert result["tiou"] == pytest.approx(accuracy)


@pytest.mark.parametrize(
    ("answer", "accuracy", "format_score"),
    [
        ({"boxes": [10, 20, 110, 220]}, 1.0, 1.0),
        ({"bbox_2d": [10, 20, 110, 220]}, 1.0, 1.0),
        ([{"bbox_2d": [10, 20, 110, 220], "label": "dog"}], 1.0, 1.0),
        ([10, 20, 110, 220], 1.0, 1.0),
        ({"boxes": [[10, 20, 110, 220]]}, 1.0, 1.0),
        ({"boxes": [60, 20, 160, 220]}, 50 * 200 / (2 * 100 * 200 - 50 * 200), 1.0),
        ({"boxes": [110, 220, 10, 20]}, 0.0, 0.5),  # swapped corners
        ({"boxes": [10, 20, 110]}, 0.0, 0.5),
        ({"boxes": [[10, 20, 110, 220], [0, 0, 5, 5]]}, 0.0, 0.5),  # several boxes
        ({"boxes": [10, 20, "nan", 220]}, 0.0, 0.5),
        ({"boxes": [10, 20, 1e309, 220]}, 0.0, 0.5),
        ({"boxes": [-500, -500, -400, -400]}, 0.0, 1.0),  # outside the frame
        ({"time": [1, 2]}, 0.0, 0.5),
    ],
)
def test_spatial_grounding(score, answer, accuracy: float, format_score: float) -> None:
    result = score(f"<answer>{json.dumps(answer)}</answer>", '{"boxes": [10, 20, 110, 220]}', "spatial grounding")
    assert result["accuracy"] == pytest.approx(accuracy)
    assert result["format"] == format_score
    assert 0.0 <= result["box_iou"] <= 1.0


def test_spatial_grounding_box_format_per_record(score) -> None:
    gt = '<answer>{"boxes": [0, 0, 320, 240]}</answer>'
    qwen3 = '<answer>{"boxes": [0, 0, 500, 500]}</answer>'
    meta = {"box_format": "grid1000", "gt_box_format": "pixel", "width": 640, "height": 480}
    assert score(qwen3, gt, "spatial grounding", **meta)["accuracy"] == pytest.approx(1.0)
    assert score(qwen3, gt, "spatial grounding")["accuracy"] < 1.0  # read as pixels by default
    config = RewardConfig(strict=True, default_box_format="grid1000")
    assert score(qwen3, '{"boxes": [0, 0, 500, 500]}', "spatial grounding", config=config)["accuracy"] == 1.0


STVG_GT = '<answer>{"time": [8.5, 11.2], "boxes": {"9": [0, 0, 10, 10], "10": [0, 0, 10, 10], "11": [0, 0, 10, 10], "12": [0, 0, 10, 10]}}</answer>'
BOX = [0, 0, 10, 10]
HALF = [0, 0, 5, 10]


@pytest.mark.parametrize(
    ("answer", "accuracy"),
    [
        ({"time": [8.5, 11.2], "boxes": {"9": BOX, "10": BOX, "11": BOX}}, 1.0),
        ({"time": [8.5, 11.2], "boxes": {"9.0": BOX, "10.0": BOX, "11": BOX}}, 1.0),  # keys compare as numbers
        # one lucky box no longer earns the full box score: missing seconds count 0
        ({"time": [8.5, 11.2], "boxes": {"10": BOX}}, 0.5 + 0.5 / 3),
        ({"time": [8.5, 11.2], "boxes": {}}, 0.5),
        ({"time": [8.5, 11.2], "boxes": {"9": HALF, "10": BOX, "11": BOX}}, 0.5 + 0.5 * (2.5 / 3)),
        ({"time": [8.5, 11.2], "boxes": {"9": BOX, "9.0": HALF, "10": BOX, "11": BOX}}, 0.5 + 0.5 * (2.5 / 3)),
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
    assert score('<answer>{"time": [2.0, 3.0], "boxes": {}}</answer>', gt, "stvg")["accuracy"] == pytest.approx(0.5)


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
    from easyvideor1.rewards import GroundTruthError

    with pytest.raises(GroundTruthError):
        score("<answer>{}</answer>", "<answer>not json</answer>", problem_type)
