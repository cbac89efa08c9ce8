"""Yes/no answers (boolean, binary classification, OVO-Bench SSR and CRR).

Words are matched whole ("NO" inside "KNOW" is not an answer; the published eval matched
substrings). The first yes/no word of the stated answer decides: "Yes, there is no doubt." is yes
and "No, it is not; yes-men would disagree" is no; a later opposite word in the explanation does not
cancel it. Both polarities offered together ("yes or no", "Yes/No", "no and yes", "yes, no.") are a
hedge and name no answer. Free text without a tag or statement counts only when its first word is
the polarity ("Yes, because ..."). A response that commits to both ("The answer is yes. The answer
is no.", "\\boxed{Yes} \\boxed{No}") has no answer. "1" and "0" are yes and no when they are the whole answer, for
ground truths and responses alike.
"""

from __future__ import annotations

import re

from easyvideor1.rewards.parsing import clean_short_answer, normalize_text
from easyvideor1.rewards.registry import register_task
from easyvideor1.rewards.sample import GroundTruthError, Sample, TaskScore

_POLARITY = {"yes": "yes", "true": "yes", "y": "yes", "是": "yes", "对": "yes",
             "no": "no", "false": "no", "n": "no", "否": "no", "不是": "no", "错": "no"}  # fmt: skip
_DIGITS = {"1": "yes", "0": "no"}
# CJK ideographs one by one (so "是或否" is 是, 或, 否), other scripts as whole words.
_WORD_RE = re.compile(r"不是|[\u3400-\u9fff]|[^\W\d_\u3400-\u9fff]+")
# Words that join two offered answers: "yes or no", "yes and no", "yes, or maybe no", "是或否".
_CONNECTORS = frozenset(
    {"or", "and", "nor", "maybe", "perhaps", "possibly", "probably", "either", "也", "或", "或者", "还是"}
)
_WORD_AFTER_RE = re.compile(r"\s*+[^\W\d_]")


def read_polarity(text: str, first_word_only: bool = False) -> str | None:
    """ "yes" or "no" named by `text`, or None (neither, or both offered as a hedge).

    The first polarity word decides; `first_word_only` requires it to be the first word (free text).
    """
    normal = normalize_text(clean_short_answer(text))
    if normal in _DIGITS:
        return _DIGITS[normal]
    words = list(_WORD_RE.finditer(normal))
    for index, match in enumerate(words):
        word = match.group()
        # a lone "y"/"n" is an answer only when it is the whole answer
        if word in _POLARITY and (word not in ("y", "n") or len(words) == 1):
            polarity = _POLARITY[word]
            return None if _hedged(normal, words, index, polarity) else polarity
        if first_word_only:
            return None
    return None


def _hedged(text: str, words: list[re.Match[str]], index: int, polarity: str) -> bool:
    """Whether the opposite polarity is offered right after the first one ("yes or no", "yes/no")."""
    following = index + 1
    joined = False
    while following < len(words) and words[following].group() in _CONNECTORS:
        following, joined = following + 1, True
    if following >= len(words) or _POLARITY.get(words[following].group(), polarity) == polarity:
        return False
    if joined:
        return True
    # Only punctuation in between: "Yes/No", "yes, no." are hedges, but in "Yes, no doubt." the
    # "no" is a determiner: a word follows it directly.
    second = words[following]
    return second.group() not in ("no",) or _WORD_AFTER_RE.match(text, second.end()) is None


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
    truth = read_polarity(sample.truth)
    if truth is None:
        raise GroundTruthError(f"boolean ground truth is not yes/no: {sample.truth!r}")
    answer = sample.answer
    first_word_only = answer.source == "text"
    # every commitment ("<answer>yes</answer> The answer is no.") must name the same polarity
    predicted = answer.read(lambda text: read_polarity(text, first_word_only=first_word_only))
    return TaskScore(float(predicted == truth), predicted is not None, predicted)
