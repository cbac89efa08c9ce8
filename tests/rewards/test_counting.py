"""Counting (OVO-Bench REC): exact whole numbers."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("response", "accuracy"),
    [("<answer>7</answer>", 1.0), ("<answer>seven</answer>", 1.0), ("<answer>7.0</answer>", 1.0),
     ("<answer>8</answer>", 0.0), ("<answer>7.2</answer>", 0.0), ("<answer>70%</answer>", 0.0)],
)  # fmt: skip
def test_counting_is_exact(score, response: str, accuracy: float) -> None:
    assert score(response, "7", "REC")["accuracy"] == accuracy
