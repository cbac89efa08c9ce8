"""Regression (VSI-Bench): mean relative accuracy (MRA) of one stated number.

MRA = fraction of the confidence thresholds θ ∈ {0.50, 0.55, ..., 0.95} for which the relative error
|pred - gt| / |gt| is at most 1 - θ (VSI-Bench compares with `<=`). A ground truth of 0 only
accepts 0. The percent rule of `rewards/numbers.py` applies (a percent sign means hundredths).
"""

from __future__ import annotations

from easyvideor1.rewards.numbers import relative_error
from easyvideor1.rewards.registry import register_task
from easyvideor1.rewards.sample import Sample, TaskScore
from easyvideor1.rewards.tasks.numerical import format_number, read_number, truth_number

# 1 - θ for θ = 0.50 ... 0.95, as exact twentieths so that float steps do not move a boundary.
_ALLOWED_ERRORS = tuple(step / 20 for step in range(10, 0, -1))
_FLOAT_SLACK = 1e-9


def mean_relative_accuracy(error: float) -> float:
    """Share of the ten VSI-Bench thresholds that a relative error passes."""
    return sum(error <= allowed + _FLOAT_SLACK for allowed in _ALLOWED_ERRORS) / len(_ALLOWED_ERRORS)


@register_task(
    "regression",
    aliases=("mra", "numerical regression"),
    instruction="Give the number inside <answer></answer>.",
)
def score_regression(sample: Sample) -> TaskScore:
    """Mean relative accuracy of the stated number (0 when no single number is stated)."""
    truth = truth_number(sample.truth, sample.task)
    predicted = read_number(sample.answer)
    if predicted is None:
        return TaskScore(0.0, False, None, {"relative_error": 1e6})
    error = relative_error(predicted, truth)
    details = {"relative_error": min(error, 1e6)}
    return TaskScore(mean_relative_accuracy(error), True, format_number(predicted), details)
