"""Math: symbolic equivalence of the stated answer and the ground truth, through math-verify.

math-verify guards itself with `signal.alarm`, which fails off the main thread and cannot stop C
code. It is called with its timeouts disabled, inside `IsolatedCaller`'s helper process, which is
killed after `RewardConfig.math_timeout_s` (a timeout scores 0 and sets `math_timeout`).
A record with options whose ground truth is a letter is scored as multiple choice.
"""

from __future__ import annotations

import logging

from easyvideor1.rewards.isolation import CallTimeout, IsolatedCaller
from easyvideor1.rewards.parsing import clean_short_answer, normalize_text
from easyvideor1.rewards.registry import register_task
from easyvideor1.rewards.sample import GroundTruthError, Sample, TaskScore
from easyvideor1.rewards.tasks.multiple_choice import choice_instruction, choose, truth_letter

_CALLER = IsolatedCaller()
# Free text is an answer only when short: the first expression of a paragraph is not its answer.
_MAX_FREE_TEXT_CHARS = 80


def _parse(text: str) -> list:
    from math_verify import parse

    for candidate in (f"${text}$", text, f"\\boxed{{{text}}}"):
        parsed = parse(candidate, parsing_timeout=None)
        if parsed:
            return parsed
    return []


def equivalent(truth: str, prediction: str) -> bool:
    """math-verify equivalence (run in the helper process; no timeout of its own)."""
    from math_verify import verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    gold, target = _parse(truth), _parse(prediction)
    return bool(gold and target and verify(gold, target, timeout_seconds=None))


def math_instruction(options: list[str] | None) -> str:
    """A math question with options is scored by its letter (see `score_math`), so it asks for one."""
    if options:
        return choice_instruction(options)
    return "Give the final answer (a number or an expression) inside <answer></answer>."


@register_task(
    "math",
    aliases=("mathematics", "math reasoning", "symbolic"),
    expensive=True,
    instruction=math_instruction,
)
def score_math(sample: Sample) -> TaskScore:
    """1 if the stated answer is mathematically equivalent to the ground truth."""
    if sample.options:
        try:
            letter = truth_letter(sample.truth, sample.options)
        except GroundTruthError:
            letter = None
        if letter is not None:
            choice = choose(sample.answer, sample.body, sample.options)
            correct = choice.status == "ok" and choice.letter == letter
            return TaskScore(float(correct), choice.well_formed, choice.letter, {"math_timeout": 0.0})
    answer = sample.answer
    text = None if answer.text is None or answer.ambiguous else clean_short_answer(answer.text)
    if answer.source == "text" and text is not None and ("\n" in text or len(text) > _MAX_FREE_TEXT_CHARS):
        text = None
    if not text:
        return TaskScore(0.0, False, None, {"math_timeout": 0.0})
    truth = clean_short_answer(sample.truth)
    if normalize_text(text) == normalize_text(truth):
        return TaskScore(1.0, True, text, {"math_timeout": 0.0})
    try:
        correct = _CALLER.call(equivalent, (truth, text), timeout=sample.config.math_timeout_s)
    except CallTimeout:
        return TaskScore(0.0, True, text, {"math_timeout": 1.0})
    return TaskScore(float(correct), True, text, {"math_timeout": 0.0})
