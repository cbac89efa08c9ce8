"""The dispatcher: weights, format score, error reporting, no rewriting."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from easyvideor1.rewards import (
    RewardConfig,
    TaskScore,
    TaskWeights,
    UnknownTaskError,
    compute_score,
    error_counts,
    register_task,
    reset_error_counts,
)

from .conftest import COLOURS

# One valid ground truth per task type, for checks that must hold for every task.
GROUND_TRUTHS = {
    "multiple choice": ("<answer>B</answer>", COLOURS),
    "numerical": ("<answer>3</answer>", None),
    "regression": ("<answer>3</answer>", None),
    "REC": ("<answer>3</answer>", None),
    "math": ("$\\frac{1}{2}$", None),
    "OCR": ("<answer>stop ahead</answer>", None),
    "boolean": ("<answer>Yes</answer>", None),
    "open-ended": ("<answer>a cat on a mat</answer>", None),
    "temporal grounding": ('<answer>{"time": [1, 2]}</answer>', None),
    "spatial grounding": ('<answer>{"boxes": [0, 0, 10, 10]}</answer>', None),
    "spatial-temporal grounding": ('<answer>{"time": [1, 2], "boxes": {"1": [0, 0, 10, 10]}}</answer>', None),
    "tracking": ('{"boxes": {"1": [0, 0, 10, 10]}}', None),
    "segmentation": ('{"size": [4, 4], "counts": [5, 2, 2, 2, 5]}', None),
    "code": ('{"test_cases": [{"input": "", "output": "1"}]}', None),
    "llava": ("<answer>Response 1</answer>", None),
}
ODD_RESPONSES = {
    "empty": "",
    "whitespace": " \n\t ",
    "long": "<think>" + "very long reasoning " * 20000 + "</think>" + "no answer here " * 5000,
    "unicode": "<think>思考🙂</think><answer>答案：🙂 ∑∫ Ελληνικά</answer>",
    "tags only": "<answer></answer><think></think>",
    "nul and controls": "<answer>\x00\x1b[31m</answer>",
    "unclosed": "<answer>",
}


@pytest.mark.parametrize("response_kind", ODD_RESPONSES)
@pytest.mark.parametrize("problem_type", GROUND_TRUTHS)
def test_odd_responses_score_zero_without_errors(score, problem_type: str, response_kind: str) -> None:
    truth, options = GROUND_TRUTHS[problem_type]
    result = score(ODD_RESPONSES[response_kind], truth, problem_type, options)
    assert result["accuracy"] == 0.0
    assert result["overall"] == pytest.approx(0.1 * result["format"])
    assert "error" not in result


def test_overall_is_weighted_sum(score) -> None:
    result = score('<answer>{"time": [1, 3]}</answer>', '{"time": [2, 3]}', "temporal grounding")
    assert result["accuracy"] == pytest.approx(0.5)
    assert result["overall"] == pytest.approx(0.9 * 0.5 + 0.1 * 1.0)


def test_per_task_weights(score) -> None:
    config = RewardConfig(
        strict=True, task_weights={"Temporal-Grounding": TaskWeights(accuracy=0.5, format=0.5)}
    )
    result = score(
        '<answer>{"time": [1, 3]}</answer>', '{"time": [2, 3]}', "temporal grounding", config=config
    )
    assert result["overall"] == pytest.approx(0.5 * 0.5 + 0.5 * 1.0)
    other = score("<answer>B</answer>", "B", "multiple choice", COLOURS, config=config)
    assert other["overall"] == pytest.approx(1.0)


def test_require_think(score) -> None:
    config = RewardConfig(strict=True, require_think=True)
    assert score("<answer>B</answer>", "B", "mc", COLOURS, config=config)["format"] == 0.0
    assert score("<think>green</think><answer>B</answer>", "B", "mc", COLOURS, config=config)["format"] == 1.0
    assert score("green ball</think><answer>B</answer>", "B", "mc", COLOURS, config=config)["format"] == 1.0
    assert score("<think></think><answer>B</answer>", "B", "mc", COLOURS, config=config)["format"] == 0.0


@pytest.mark.parametrize("key", ["overlong_buffer", "overlong_max_length", "overlong_penalty_factor"])
def test_the_reward_level_overlong_penalty_is_gone(score, key: str) -> None:
    # one overlong penalty: algorithm.overlong in the training step; the old keys say where it went
    with pytest.raises(ValueError, match="algorithm.overlong"):
        RewardConfig(**{key: 10})
    result = score("<answer>B</answer>", "B", "multiple choice", COLOURS, response_length=10**6)
    assert "overlong_penalty" not in result and result["overall"] == pytest.approx(1.0)


def test_task_errors_are_reported_not_zeroed_silently(caplog) -> None:
    reset_error_counts()
    with caplog.at_level(logging.WARNING, logger="easyvideor1.rewards"):
        result = compute_score("<answer>1</answer>", "<answer>not a number</answer>", "numerical")
        compute_score("<answer>1</answer>", "<answer>still not</answer>", "numerical")
    assert result["overall"] == 0.0
    assert result["error"].startswith("GroundTruthError")
    assert error_counts() == {"numerical": 2}
    assert sum("GroundTruthError" in record.getMessage() for record in caplog.records) == 1  # logged once
    reset_error_counts()
    assert error_counts() == {}


def test_strict_mode_raises(score) -> None:
    from easyvideor1.rewards import GroundTruthError

    with pytest.raises(GroundTruthError):
        score("<answer>1</answer>", "<answer>nan</answer>", "numerical")


def test_unknown_task_is_an_error_not_a_fallback() -> None:
    with pytest.raises(UnknownTaskError, match="did you mean"):
        compute_score("<answer>B</answer>", "B", "multiple chioce")


@register_task("echo_for_tests", override=True)
def _echo(sample) -> TaskScore:
    """Reports what the task received, so tests can check nothing was rewritten or dropped."""
    return TaskScore(1.0, None, sample.response, {"meta_keys": float(len(sample.meta))})


@pytest.mark.parametrize(
    "response",
    [
        "<answer>if a < b and c > d: print(a / b)</answer>",
        "x </ y > z / w",
        "<answer>\n    def f():\n        return 1 < 2\n</answer>",
        "  leading and trailing  ",
    ],
)
def test_response_is_never_rewritten(score, response: str) -> None:
    assert score(response, "x", "echo for tests")["prediction"] == response


def test_options_and_record_fields_reach_the_task(score) -> None:
    result = score("r", "x", "echo_for_tests", ["A. a"], data_type="video", problem_id=7, box_format="pixel")
    assert result["meta_keys"] == 3.0
    listed = score("<answer>green</answer>", "B", "multiple choice", "['A. red', 'B. green']")
    assert listed["accuracy"] == 1.0  # options stored as a string are read too


def test_same_function_scores_evaluation_predictions(score) -> None:
    """An eval prediction without tags (Qwen3 thinking) is read by the same code as a rollout."""
    result = score(
        "Let me think.</think>\nTherefore, the final answer is: B", "<answer>B</answer>", "mc", COLOURS
    )
    assert (result["accuracy"], result["format"], result["prediction"]) == (1.0, 0.0, "B")


FRAGMENTS = ["<answer>", "</answer>", "<think>", "</think>", "{", "}", "[", "]", '"time"', '"boxes"', ":", ",",
             "1", "2.5", "NaN", "-1e309", "A", "B", " or ", "the final answer is", "\\boxed{", "yes", "no",
             "Response 1", "tie", "%", "1/0", "\n", " ", "中文", "🙂", "'"]  # fmt: skip
responses = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=3)), max_size=30).map("".join)


@settings(max_examples=150, deadline=None)
@given(response=responses, problem_type=st.sampled_from([t for t in GROUND_TRUTHS if t != "code"]))
def test_fuzzed_responses_never_raise_and_stay_bounded(response: str, problem_type: str) -> None:
    truth, options = GROUND_TRUTHS[problem_type]
    result = compute_score(response, truth, problem_type, options, config=RewardConfig(strict=True))
    assert 0.0 <= result["accuracy"] <= 1.0 and 0.0 <= result["overall"] <= 1.0
    assert result["format"] in (0.0, 0.5, 1.0)
