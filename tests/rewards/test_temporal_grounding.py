"""Temporal grounding: tIoU, span validation, and the Charades-STA ground-truth quirk."""

from __future__ import annotations

import pytest

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
def test_temporal_grounding_charades_quirk(
    score, response: str, accuracy: float, format_score: float
) -> None:
    result = score(response, CHARADES_GT, "temporal grounding")
    assert result["accuracy"] == pytest.approx(accuracy)
    assert result["format"] == format_score
    assert result["tiou"] == pytest.approx(accuracy)
