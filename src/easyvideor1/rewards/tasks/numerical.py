"""Numerical answers: one number, compared with an explicit relative-aware tolerance.

Parsing, the forms read (decimal only: "0x5" is refused) and the percent rule ("2%" is 0.02) are in
`rewards/numbers.py`. Tolerance: `RewardConfig.numeric_rel_tol` (0.5 %) and `numeric_abs_tol` (1e-6).
A response naming several different numbers has no answer, whether in one answer ("3 or 4") or in
several commitments ("\\boxed{3} \\boxed{2}", "The answer is 3. The answer is 2.").
"""

from __future__ import annotations

from collections.abc import Callable

from easyvideor1.rewards.numbers import ParsedNumber, numbers_match, parse_number, same_number
from easyvideor1.rewards.parsing import ExtractedAnswer, clean_short_answer
from easyvideor1.rewards.registry import register_task
from easyvideor1.rewards.sample import GroundTruthError, Sample, TaskScore


def read_number(answer: ExtractedAnswer) -> ParsedNumber | None:
    """The single number of an extracted answer, or None (no answer, no number, several numbers,
    or commitments to different numbers)."""
    return answer.read(_number_of, same_number)


def _number_of(text: str) -> ParsedNumber | None:
    return parse_number(clean_short_answer(text))


def truth_number(truth: str, task: str) -> ParsedNumber:
    """The number of a ground truth; raises `GroundTruthError` when it has none."""
    number = parse_number(clean_short_answer(truth))
    if number is None:
        raise GroundTruthError(f"{task} ground truth is not one number: {truth[:100]!r}")
    return number


def format_number(number: ParsedNumber | None) -> str | None:
    """A number as prediction text ("12.97", "50%")."""
    if number is None:
        return None
    return f"{number.value:.10g}" + ("%" if number.percent else "")


def score_number(
    sample: Sample, truth: ParsedNumber, matches: Callable[[ParsedNumber, ParsedNumber], bool]
) -> TaskScore:
    """1 if the response's one number ``matches(predicted, truth)``, else 0; formatted when read."""
    predicted = read_number(sample.answer)
    correct = predicted is not None and matches(predicted, truth)
    return TaskScore(float(correct), predicted is not None, format_number(predicted))


@register_task(
    "numerical",
    aliases=("number", "numeric", "numerical answer", "numerical value"),
    instruction="Give the number inside <answer></answer>.",
)
def score_numerical(sample: Sample) -> TaskScore:
    """1 if the stated number equals the ground truth within tolerance, else 0."""
    rel_tol, abs_tol = sample.config.numeric_rel_tol, sample.config.numeric_abs_tol
    truth = truth_number(sample.truth, sample.task)
    return score_number(sample, truth, lambda predicted, t: numbers_match(predicted, t, rel_tol, abs_tol))
