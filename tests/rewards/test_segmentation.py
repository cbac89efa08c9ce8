"""Segmentation: mask IoU over COCO RLE, polygons and boxes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pycocotools import mask as mask_utils

from easyvideor1.rewards.tasks.segmentation import _decode_counts


def rle(mask: np.ndarray) -> dict:
    encoded = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
    return {"size": [int(v) for v in encoded["size"]], "counts": encoded["counts"].decode()}


FULL = np.zeros((20, 30), dtype=np.uint8)
FULL[5:15, 10:20] = 1
LEFT = np.zeros((20, 30), dtype=np.uint8)
LEFT[5:15, 10:15] = 1
GT = json.dumps(rle(FULL))


@pytest.mark.parametrize(
    ("answer", "accuracy", "format_score"),
    [
        (rle(FULL), 1.0, 1.0),
        ({"mask": rle(FULL)}, 1.0, 1.0),
        (rle(LEFT), 0.5, 1.0),
        (
            {"size": [20, 30], "counts": mask_utils.encode(np.asfortranarray(FULL))["counts"].decode()},
            1.0,
            1.0,
        ),
        ({"boxes": [10, 5, 20, 15]}, 1.0, 1.0),  # a box is rasterised
        ({"polygons": [[10, 5, 20, 5, 20, 15, 10, 15]]}, 1.0, 1.0),
        ({"size": [10, 30], "counts": rle(FULL)["counts"]}, 0.0, 0.5),  # wrong size
        ({"size": [20, 30], "counts": rle(FULL)["counts"] + "o"}, 0.0, 0.5),  # malformed RLE string
        ({"size": [20, 30], "counts": [1, 2, 3]}, 0.0, 0.5),  # runs do not cover the frame
        ({"size": [20, 30], "counts": [-5, 605]}, 0.0, 0.5),
        ({"polygons": [[1, 2, 3]]}, 0.0, 0.5),
        ({"polygons": [[1, 2, 3, "x", 5, 6]]}, 0.0, 0.5),
        ({"nothing": 1}, 0.0, 0.5),
    ],
)
def test_segmentation(score, answer, accuracy: float, format_score: float) -> None:
    result = score(f"<answer>{json.dumps(answer)}</answer>", GT, "segmentation")
    assert result["accuracy"] == pytest.approx(accuracy, abs=0.02)
    assert result["format"] == format_score


def test_polygon_ground_truth_uses_record_size(score) -> None:
    polygon = [[10, 5, 20, 5, 20, 15, 10, 15]]
    result = score(
        f"<answer>{json.dumps(rle(FULL))}</answer>", json.dumps(polygon), "segmentation", width=30, height=20
    )
    assert result["accuracy"] == pytest.approx(1.0, abs=0.15)


def test_video_masks_mean_over_ground_truth_seconds(score) -> None:
    truth = json.dumps({"masks": {"1": rle(FULL), "2": rle(FULL)}})
    one = {"masks": {"1.0": rle(FULL)}}
    assert score(f"<answer>{json.dumps(one)}</answer>", truth, "video segmentation")[
        "accuracy"
    ] == pytest.approx(0.5)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # pycocotools decode vs numpy 2
def test_rle_decoder_matches_pycocotools() -> None:
    rng = np.random.default_rng(0)
    for _ in range(20):
        mask = rng.random((17, 23)) > 0.6
        encoded = mask_utils.encode(np.asfortranarray(mask.astype(np.uint8)))
        runs = _decode_counts(encoded["counts"].decode())
        assert runs is not None and sum(runs) == 17 * 23
        decoded = mask_utils.decode(mask_utils.frPyObjects({"size": [17, 23], "counts": runs}, 17, 23))
        assert (decoded == mask).all()
