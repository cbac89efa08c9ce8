"""Yes/no answers (boolean, binary classification, OVO-Bench SSR and CRR).

Words are matched whole ("NO" inside "KNOW" is not an answer; the published eval matched
substrings). An answer naming both polarities ("yes and no") has none. Free text without a tag or
statement counts only when its first word is the polarity ("Yes, because ...").
"""

from __future__ import annotations

import re

from easyvideor1.rewards.parsing import clean_short_answer, normalize_text
from easyvideor1.rewards.registry import register_task
from easyvideor1.rewards.sample import GroundTruthError, Sample, TaskScore

_POLARITY = {"yes": "yes", "true": "yes", "y": "yes", "是": "yes", "对": "yes",
             "no": "no", "false": "no", "n": "no", "否": "no", "不是": "no", "错": "no"}  # fmt: skip
_WORD_RE = re.compile(r"不是|[是否对错]|[^\W\d_]+")


def read_polarity(text: str, first_word_only: bool = False) -> str | None:
    """ "yes" or "no" named by `text`, or None (neither, or both)."""
    words = _WORD_RE.findall(normalize_text(clean_short_answer(text)))
    if first_word_only:
        words = words[:1]
    # a lone "y"/"n" is an answer only when it is the whole answer
    found = {_POLARITY[word] for word in words if word in _POLARITY and (word not in "yn" or len(words) == 1)}
    return found.pop() if len(found) == 1 else None


@register_task(
    "boolean",
    aliases=(
        "binary classification",
        "binary",
        "yes/no",
        "yes no",
        "true/false",
        "true false",
        "ssr",
        "crr",
        "judgement",
    ),
    instruction="Answer Yes or No inside <answer></answer>.",
)
def score_boolean(sample: Sample) -> TaskScore:
    """1 if the stated yes/no equals the ground truth's."""
    truth_text = sample.truth.strip()
    truth = {"1": "yes", "0": "no"}.get(truth_text) or read_polarity(truth_text)
    if truth is None:
        raise GroundTruthError(f"boolean ground truth is not yes/no: {sample.truth!r}")
    answer = sample.answer
    predicted = None
    if answer.text is not None and not answer.ambiguous:
        predicted = read_polarity(answer.text, first_word_only=answer.source == "text")
    return TaskScore(float(predicted == truth), predicted is not None, predicted)
