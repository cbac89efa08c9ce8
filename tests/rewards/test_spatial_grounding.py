"""Spatial grounding: box IoU, answer shapes, box conventions."""

from __future__ import annotations

import json

import pytest

from easyvideor1.rewards import RewardConfig


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
    result = score(
        f"<answer>{json.dumps(answer)}</answer>", '{"boxes": [10, 20, 110, 220]}', "spatial grounding"
    )
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
