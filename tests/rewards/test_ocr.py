"""OCR: token edit similarity of the stated text."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("response", "accuracy"),
    [
        ("<answer>STOP AHEAD</answer>", 1.0),
        ("The answer is: stop ahead", 1.0),
        ("The sign reads: stop ahead", 0.0),
        ("<answer>stop</answer>", 0.5),
        ("", 0.0),
    ],
)
def test_ocr(score, response: str, accuracy: float) -> None:
    assert score(response, "<answer>Stop ahead</answer>", "OCR")["accuracy"] == pytest.approx(accuracy)
