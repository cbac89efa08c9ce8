"""Numerical answers: tolerance, percent rule, no first-number guessing."""

from __future__ import annotations

import pytest

from easyvideor1.rewards import RewardConfig


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


@pytest.mark.parametrize(
    ("prediction", "truth"), [("50%", "0.5"), ("0.5", "50%"), ("50%", "50%"), ("1/2", "0.5")]
)
def test_numerical_percent_and_fractions(score, prediction: str, truth: str) -> None:
    assert score(f"<answer>{prediction}</answer>", truth, "numerical")["accuracy"] == 1.0


@pytest.mark.parametrize(("prediction", "truth"), [("50", "50%"), ("50%", "50")])
def test_numerical_percent_is_hundredths_not_a_dropped_unit(score, prediction: str, truth: str) -> None:
    # 50% is 0.5: reading it also as 50 made "2%" and "200%" both equal 2
    assert score(f"<answer>{prediction}</answer>", truth, "numerical")["accuracy"] == 0.0
