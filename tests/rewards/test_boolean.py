"""Yes/no answers (boolean, binary classification, OVO-Bench SSR/CRR)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("response", "truth", "accuracy", "format_score"),
    [
        ("<answer>Yes</answer>", "<answer>Yes</answer>", 1.0, 1.0),
        ("<answer>yes.</answer>", "yes", 1.0, 1.0),
        ("<answer>True</answer>", "Yes", 1.0, 1.0),
        ("<answer>No</answer>", "yes", 0.0, 1.0),
        ("<answer>false</answer>", "No", 1.0, 1.0),
        ("<answer>Yes, he is running</answer>", "yes", 1.0, 1.0),
        ("<answer>Yes and no</answer>", "yes", 0.0, 0.5),
        ("<answer>I KNOW</answer>", "no", 0.0, 0.5),  # "NO" inside "KNOW" is not an answer
        ("<answer>Y</answer>", "yes", 1.0, 1.0),
        ("<answer>是</answer>", "yes", 1.0, 1.0),
        ("<answer>不是</answer>", "no", 1.0, 1.0),
        ("Yes, the person is still cooking.", "yes", 1.0, 0.0),
        ("The person is not cooking, no doubt, yes.", "yes", 0.0, 0.0),  # free text: first word only
        ("Therefore, the final answer is: NO", "no", 1.0, 0.0),
        ("", "no", 0.0, 0.0),
        ("<answer>Yes</answer>", "1", 1.0, 1.0),
    ],
)
def test_boolean(score, response: str, truth: str, accuracy: float, format_score: float) -> None:
    result = score(response, truth, "binary classification")
    assert (result["accuracy"], result["format"]) == (accuracy, format_score)


@pytest.mark.parametrize("problem_type", ["SSR", "CRR", "boolean"])
def test_ovo_bench_yes_no_types(score, problem_type: str) -> None:
    assert score("<answer>YES</answer>", "<answer>Yes</answer>", problem_type)["accuracy"] == 1.0
