"""Numerical, regression (MRA) and counting tasks."""

from __future__ import annotations

import pytest

from easyvideor1.rewards import RewardConfig
from easyvideor1.rewards.tasks.regression import mean_relative_accuracy


@pytest.mark.parametrize(
    ("response", "accuracy", "format_score"),
    [
        ("<answer>12.97</answer>", 1.0, 1.0),
        ("<answer>12.97 m/s</answer>", 1.0, 1.0),
        ("<answer>13</answer>", 1.0, 1.0),
        ("<answer>12.5</answer>", 0.0, 1.0),
        ("<answer>about 13 or 14</answer>", 0.0, 0.5),
        ("<answer>unknown</answer>", 0.0, 0.5),
        ("<think>I measured 3 then 12.97</think><answer>12.97</answer>", 1.0, 1.0),
        ("Therefore, the final answer is: 12.97", 1.0, 0.0),
        ("The answer is $\\boxed{12.97}$", 1.0, 0.0),
        ("12.97", 1.0, 0.0),
        # the first number of a rambling text is not its answer
        ("At 12.97 seconds the car passes; later it reaches 40 km/h and stops after 3 laps.", 0.0, 0.0),
        ("", 0.0, 0.0),
    ],
)
def test_numerical(score, response: str, accuracy: float, format_score: float) -> None:
    result = score(response, "<answer>12.97</answer>", "numerical")
    assert (result["accuracy"], result["format"]) == (accuracy, format_score)


def test_numerical_tolerance_is_configurable(score) -> None:
    loose = RewardConfig(strict=True, numeric_rel_tol=0.05)
    assert score("<answer>13.5</answer>", "12.97", "number")["accuracy"] == 0.0
    assert score("<answer>13.5</answer>", "12.97", "number", config=loose)["accuracy"] == 1.0


@pytest.mark.parametrize(("prediction", "truth"), [("50%", "0.5"), ("0.5", "50%"), ("50", "50%"), ("1/2", "0.5")])
def test_numerical_percent_and_fractions(score, prediction: str, truth: str) -> None:
    assert score(f"<answer>{prediction}</answer>", truth, "numerical")["accuracy"] == 1.0


@pytest.mark.parametrize(
    ("error", "mra"),
    [(0.0, 1.0), (0.04, 1.0), (0.05, 1.0), (0.06, 0.9), (0.1, 0.9), (0.3, 0.5), (0.5, 0.1), (0.51, 0.0), (2.0, 0.0)],
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


@pytest.mark.parametrize(
    ("response", "accuracy"),
    [("<answer>7</answer>", 1.0), ("<answer>seven</answer>", 1.0), ("<answer>7.0</answer>", 1.0),
     ("<answer>8</answer>", 0.0), ("<answer>7.2</answer>", 0.0), ("<answer>70%</answer>", 0.0)],
)  # fmt: skip
def test_counting_is_exact(score, response: str, accuracy: float) -> None:
    assert score(response, "7", "REC")["accuracy"] == accuracy
