"""Open-ended answers: ROUGE and the (off by default) LLM-judge hook."""

from __future__ import annotations

import pytest

from easyvideor1.rewards import RewardConfig


@pytest.mark.parametrize(
    ("response", "truth", "accuracy"),
    [
        ("<answer>Dolly Zoom</answer>", "<answer>Dolly Zoom</answer>", 1.0),
        ("<answer>dolly zoom.</answer>", "<answer>Dolly Zoom</answer>", 1.0),
        ("<answer>El Niño</answer>", "<answer>El Niño</answer>", 1.0),
        ("<answer>北京</answer>", "北京", 1.0),
        ("<answer>a cat</answer>", "a dog", 1 / 3),  # rouge1 0.5, rouge2 0, rougeL 0.5
        ("<answer>something else</answer>", "Dolly Zoom", 0.0),
        ("<answer></answer>", "Dolly Zoom", 0.0),
        ("", "Dolly Zoom", 0.0),
    ],
)
def test_open_ended(score, response: str, truth: str, accuracy: float) -> None:
    assert score(response, truth, "open-ended")["accuracy"] == pytest.approx(accuracy)


def test_open_ended_judge_hook(score, tmp_path) -> None:
    judge = tmp_path / "judge.py"
    judge.write_text(
        "def judge(prediction, ground_truth, **record):\n    return 1.0 if 'zoom' in prediction.lower() else 0.0\n"
    )
    config = RewardConfig(strict=True, llm_judge=f"{judge}:judge")
    assert (
        score("<answer>a vertigo zoom</answer>", "Dolly Zoom", "video qa", config=config)["accuracy"] == 1.0
    )
    assert score("<answer>a pan</answer>", "Dolly Zoom", "video qa", config=config)["accuracy"] == 0.0
    assert RewardConfig().llm_judge is None  # off by default
