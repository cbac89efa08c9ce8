"""Regression: VSI-Bench mean relative accuracy."""

from __future__ import annotations

import pytest

from easyvideor1.rewards.tasks.regression import mean_relative_accuracy


@pytest.mark.parametrize(
    ("error", "mra"),
    [
        (0.0, 1.0),
        (0.04, 1.0),
        (0.05, 1.0),
        (0.06, 0.9),
        (0.1, 0.9),
        (0.3, 0.5),
        (0.5, 0.1),
        (0.51, 0.0),
        (2.0, 0.0),
    ],
)
def test_mean_relative_accuracy(error: float, mra: float) -> None:
    assert mean_relative_accuracy(error) == pytest.approx(mra)


@pytest.mark.parametrize(
    ("response", "truth", "accuracy"),
    [
        ("<answer>4</answer>", "<answer>4</answer>", 1.0),
        ("<answer>4.2</answer>", "<answer>4</answer>", 1.0),
        ("<answer>4.3</answer>", "<answer>4</answer>", 0.9),
        ("<answer>3</answer>", "<answer>4</answer>", 0.6),
        ("<answer>2</answer>", "<answer>4</answer>", 0.1),
        ("<answer>9</answer>", "<answer>4</answer>", 0.0),
        ("<answer>0</answer>", "<answer>0</answer>", 1.0),
        ("<answer>1</answer>", "<answer>0</answer>", 0.0),
        ("<answer>2 or 6</answer>", "<answer>4</answer>", 0.0),
        ("no idea", "<answer>4</answer>", 0.0),
    ],
)
def test_regression_vsibench(score, response: str, truth: str, accuracy: float) -> None:
    assert score(response, truth, "regression", None)["accuracy"] == pytest.approx(accuracy)
