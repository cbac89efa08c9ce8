"""Preference / critic labels, parsed strictly."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("response", "truth", "accuracy"),
    [
        ("<answer>Response 1</answer>", "Response 1", 1.0),
        ("<answer>**response 2**.</answer>", "<answer>Response 2</answer>", 1.0),
        ("<answer>Tie</answer>", "tie", 1.0),
        ("<answer>Response 1</answer>", "2", 0.0),
        ("<answer>Response 1 is worse than Response 2</answer>", "Response 1", 0.0),  # strict
        ("<answer>Response 1 or Response 2</answer>", "Response 2", 0.0),
        ("<answer>1</answer>", "Response 1", 0.0),
        ("Therefore, the final answer is: Response 2", "Response 2", 1.0),
        ("", "tie", 0.0),
    ],
)
def test_preference(score, response: str, truth: str, accuracy: float) -> None:
    assert score(response, truth, "llava")["accuracy"] == accuracy
