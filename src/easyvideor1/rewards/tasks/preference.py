"""Preference / critic labels (LLaVA-Critic style): "Response 1", "Response 2" or "Tie", parsed strictly.

The stated answer must be exactly one label (case, markdown and end punctuation aside): "Response 1
is worse than Response 2" is not a label (the published module read it as "Response 1").
"""

from __future__ import annotations

import re

from easyvideor1.rewards.parsing import clean_short_answer, normalize_text
from easyvideor1.rewards.registry import register_task
from easyvideor1.rewards.sample import GroundTruthError, Sample, TaskScore

_LABEL_RE = re.compile(r"(?:response\s*([12])|(tie))")
_TRUTH_RE = re.compile(r"(?:response\s*)?([12])|(tie|equal)")


def read_label(text: str, pattern: re.Pattern[str] = _LABEL_RE) -> str | None:
    """ "1", "2" or "tie" when `text` is exactly one label, else None."""
    match = pattern.fullmatch(normalize_text(clean_short_answer(text)))
    if not match:
        return None
    return match.group(1) or "tie"


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
    predicted = read_label(answer.text) if answer.text is not None and not answer.ambiguous else None
    return TaskScore(float(predicted == truth), predicted is not None, predicted)
