"""Preference / critic labels (LLaVA-Critic, VL-RewardBench, MM-RLHF style), parsed strictly.

Labels: the first or the second response, or a tie. Datasets spell them "Response 1" / "Response 2"
(LLaVA-Critic), "Answer 1" / "Answer 2" (VL-RewardBench), "Response A" / "Output (b)" / "[[A]]",
and ties as "Tie", "Two responses are equally good", "Both are equally good", "[[C]]" (MT-Bench).
Ground truths may also be a bare "1" / "2" / "A" / "B". A response must state exactly one label,
optionally "... is (slightly) better" (VL-RewardBench's judgment form): "Response 1 is worse than
Response 2" or "Response 1 or Response 2" is not a label (the published module read it as "1").
"""

from __future__ import annotations

import re

from easyvideor1.rewards.parsing import clean_short_answer, normalize_text
from easyvideor1.rewards.registry import register_task
from easyvideor1.rewards.sample import GroundTruthError, Sample, TaskScore

_WHICH = {"1": "1", "a": "1", "one": "1", "first": "1", "2": "2", "b": "2", "two": "2", "second": "2"}
_NOUN = r"(?:response|answer|output|assistant|model|candidate|option)"
_SIDE = r"(?:[12ab]|one|two)"
_TIE = (
    r"(?:it\s+is\s+a\s+|a\s+)?tie|\[\[c\]\]|draw|equal(?:ly\s+good)?|same"
    r"|(?:the\s+)?(?:two|both)(?:\s+"
    + _NOUN
    + r"s)?\s+(?:are\s+)?(?:equally\s+(?:good|bad)|equal|the\s+same|tied)"
)
_BETTER = r"(?:\s+is\s+(?:slightly\s+|much\s+|clearly\s+)?(?:better|preferred|the\s+better\s+one))?"
_LABEL_RE = re.compile(
    rf"(?:{_NOUN}\s*\(?(?P<side>{_SIDE})\)?|the\s+(?P<ordinal>first|second)\s+{_NOUN}"
    rf"|\[\[(?P<bracket>[ab])\]\]){_BETTER}|(?P<tie>{_TIE})"
)
# Ground truths are trusted data: a bare side ("2", "B") is a label there.
_TRUTH_RE = re.compile(rf"{_LABEL_RE.pattern}|(?P<bare>[12ab])")


def read_label(text: str, pattern: re.Pattern[str] = _LABEL_RE) -> str | None:
    """ "1", "2" or "tie" when `text` is exactly one label, else None."""
    match = pattern.fullmatch(normalize_text(clean_short_answer(text)))
    if not match:
        return None
    if match.group("tie"):
        return "tie"
    side = next(
        group
        for group in (
            match.group("side"),
            match.group("ordinal"),
            match.group("bracket"),
            match.groupdict().get("bare"),
        )
        if group
    )
    return _WHICH[side]


@register_task(
    "preference",
    aliases=("llava", "critic", "pairwise preference", "reward model"),
    instruction='Answer "Response 1", "Response 2" or "Tie" inside <answer></answer>.',
)
def score_preference(sample: Sample) -> TaskScore:
    """1 if the stated label equals the ground-truth label."""
    truth = read_label(sample.truth, _TRUTH_RE)
    if truth is None:
        raise GroundTruthError(f"preference ground truth is not a label: {sample.truth!r}")
    answer = sample.answer
    predicted = answer.read(read_label)  # two different labels committed to name none
    return TaskScore(float(predicted == truth), predicted is not None, predicted)
