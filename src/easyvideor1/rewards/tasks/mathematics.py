"""Math: symbolic equivalence of the stated answer and the ground truth, through math-verify.

math-verify guards itself with `signal.alarm`, which fails off the main thread and cannot stop C
code. It is called with its timeouts disabled, inside `IsolatedCaller`'s helper process, which is
killed after `RewardConfig.math_timeout_s` (a timeout scores 0 and sets `math_timeout`).
A record with options whose ground truth is a letter is scored as multiple choice.

A response that commits to two different answers ("\\boxed{3} \\boxed{2}", "<answer>x+1</answer> The
final answer is x+2") scores 0: every other commitment that math-verify can read must be equivalent
to the stated answer (checked in the same helper process, only when their texts differ).
"""

from __future__ import annotations

import logging

from easyvideor1.rewards.isolation import CallTimeout, IsolatedCaller
from easyvideor1.rewards.parsing import ExtractedAnswer, clean_short_answer, normalize_text
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


def disagrees(answer: str, others: list[str]) -> bool:
    """Whether any of `others` that math-verify can read is not equivalent to `answer` (run in the
    helper process). Text it cannot read (prose after "the answer is") is no second answer."""
    from math_verify import verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    stated = _parse(answer)
    if not stated:
        return False
    for other in others:
        parsed = _parse(other)
        if parsed and not verify(stated, parsed, timeout_seconds=None):
            return True
    return False


def _short_answer(text: str) -> str | None:
    """`text` cleaned, when it is short enough to be an expression rather than a paragraph."""
    value = clean_short_answer(text)
    return value if value and "\n" not in value and len(value) <= _MAX_FREE_TEXT_CHARS else None


def _other_commitments(answer: ExtractedAnswer, text: str) -> list[str] | None:
    """The commitments whose text differs from `text`; None when a tag holds no expression."""
    others: list[str] = []
    for candidate in answer.candidates:
        value = _short_answer(candidate.text)
        if value is None:
            if answer.ambiguous and candidate.source == "answer_tag":
                return None
            continue
        if normalize_text(value) != normalize_text(text) and value not in others:
            others.append(value)
    return others


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
    text = None if answer.text is None else clean_short_answer(answer.text)
    if answer.source == "text" and text is not None and ("\n" in text or len(text) > _MAX_FREE_TEXT_CHARS):
        text = None
    if not text:
        return TaskScore(0.0, False, None, {"math_timeout": 0.0})
    others = _other_commitments(answer, text)
    if others is None:
        return TaskScore(0.0, False, None, {"math_timeout": 0.0})
    if others:
        try:
            if _CALLER.call(disagrees, (text, others), timeout=sample.config.math_timeout_s):
                return TaskScore(0.0, False, None, {"math_timeout": 0.0})
        except CallTimeout:
            return TaskScore(0.0, False, None, {"math_timeout": 1.0})
    truth = clean_short_answer(sample.truth)
    if normalize_text(text) == normalize_text(truth):
        return TaskScore(1.0, True, text, {"math_timeout": 0.0})
    try:
        correct = _CALLER.call(equivalent, (truth, text), timeout=sample.config.math_timeout_s)
    except CallTimeout:
        return TaskScore(0.0, True, text, {"math_timeout": 1.0})
    return TaskScore(float(correct), True, text, {"math_timeout": 0.0})
