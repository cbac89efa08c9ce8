"""Counting (OVO-Bench REC): a whole number, compared exactly."""

from __future__ import annotations

from easyvideor1.rewards.registry import register_task
from easyvideor1.rewards.sample import GroundTruthError, Sample, TaskScore
from easyvideor1.rewards.tasks.numerical import score_number, truth_number


@register_task(
    "counting",
    aliases=("rec", "count", "repetition counting", "digits"),
    instruction="Give the count as a whole number inside <answer></answer>.",
)
def score_counting(sample: Sample) -> TaskScore:
    """1 if the stated count equals the ground-truth count, else 0."""
    truth = truth_number(sample.truth, sample.task)
    if truth.percent or truth.value != int(truth.value):
        raise GroundTruthError(f"counting ground truth is not a whole number: {sample.truth!r}")
    return score_number(
        sample, truth, lambda predicted, t: not predicted.percent and predicted.value == t.value
    )
