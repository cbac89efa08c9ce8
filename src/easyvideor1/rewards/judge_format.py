"""What a judge prompt may hold and how a judge's reply is read: the placeholders of
``reward.judge.prompt`` (checked when the config is read) and the verdict grammar of
``reward.judge.verdict``.

A verdict is read strictly. A format finds the place of the verdict in the reply (the token after
the last ``Judgement:``, the reply's first word, ...) and that token, without surrounding markdown
and a sentence's final punctuation, must be a whole verdict: ``1``, ``0``, ``0.75`` (a decimal
number in the format's range), or a word the format knows. ``Judgement: 1/2``, ``Judgement: 1e-9``
and ``Judgement: 0,9`` hold no verdict: the reply is not read as a score.
"""

from __future__ import annotations

import functools
import re
from collections import deque
from dataclasses import dataclass, field

from ..errors import ConfigError

PROMPT_FIELDS = ("question", "truth", "prediction")
# "{{" and "}}" are literal braces; "{name}" a placeholder; any other brace is an error
_PROMPT_TOKEN = re.compile(r"\{\{|\}\}|\{([^{}]*)\}|[{}]")
_ESCAPE_HINT = "write a literal brace as '{{' or '}}'"


def check_prompt(template: str) -> None:
    """Refuse a prompt template that ``str.format`` with the known fields could not fill, or that
    never shows the judge the answer; :class:`ConfigError` names the key and the bad placeholder."""
    known = ", ".join(f"{{{name}}}" for name in PROMPT_FIELDS)
    used = set()
    for match in _PROMPT_TOKEN.finditer(template):
        token, name = match.group(0), match.group(1)
        if token in ("{{", "}}"):
            continue
        if name is None:
            around = template[max(0, match.start() - 20) : match.end() + 20]
            raise ConfigError(f"reward.judge.prompt: a single {token!r} in {around!r}; {_ESCAPE_HINT}")
        if name not in PROMPT_FIELDS:
            raise ConfigError(
                f"reward.judge.prompt: unknown placeholder {token!r} (known: {known}); {_ESCAPE_HINT}"
            )
        used.add(name)
    if "prediction" not in used:
        raise ConfigError(
            "reward.judge.prompt: no {prediction} placeholder, so the judge would never see the answer"
        )


# the characters around a verdict token that are not part of it: markdown, quotes, brackets, and a
# sentence's final punctuation ("Judgement: **1**.")
_DECORATION = "*_`'\"()[]<>.,;:!"
_DECIMAL = re.compile(r"\d+(?:\.\d+)?")


@dataclass(frozen=True)
class VerdictFormat:
    """Where a reply holds its verdict (group 1 of ``place``'s last match) and which tokens are
    verdicts there: a decimal number divided by ``scale`` (then in [0, 1]), or one of ``words``."""

    place: re.Pattern
    scale: float | None = 1.0  # None: no number is a verdict
    words: dict[str, float] = field(default_factory=dict)
    suffix: str = ""  # an optional tail of a number, e.g. "/10"

    def read(self, text: str | None) -> float | None:
        """The verdict in ``text``, or None when the verdict's place is missing or holds no verdict."""
        last = deque(self.place.finditer(text or ""), maxlen=1)
        if not last:
            return None
        token = (last[0].group(1) or "").strip(_DECORATION)
        if token.lower() in self.words:
            return self.words[token.lower()]
        if self.scale is None:
            return None
        if self.suffix and token.endswith(self.suffix):
            token = token[: -len(self.suffix)]
        if not _DECIMAL.fullmatch(token):
            return None
        value = float(token) / self.scale
        return value if 0.0 <= value <= 1.0 else None


def _labelled(label: str) -> re.Pattern:
    """The whitespace-free token after the last ``label:``."""
    return re.compile(label + r"\s*:[\s*_]*(\S+)", re.I)


_FIRST_WORD = re.compile(r"\A[^a-zA-Z]*([a-zA-Z]+)")

VERDICTS = {
    # "Judgement: 1", "Judgement: 0", or a generative reward model's "Judgement: 0.75"
    "default": VerdictFormat(_labelled("judgement")),
    # a reply whose first word is Yes or No ("Yes.", "No, the colour differs")
    "yes_no": VerdictFormat(_FIRST_WORD, scale=None, words={"yes": 1.0, "no": 0.0}),
    # "Score: 7", "Score: 7/10", "Score: 8.5" (divided by 10)
    "score_0_10": VerdictFormat(_labelled("score"), scale=10.0, suffix="/10"),
}
# the reply formats of benchmarks' official judge prompts (``judge_reply``)
OFFICIAL_REPLIES = {
    "judgement": VERDICTS["default"],
    # VideoReasonBench: a reply that starts "Correct" or "Incorrect"
    "correct": VerdictFormat(_FIRST_WORD, scale=None, words={"correct": 1.0, "incorrect": 0.0}),
}


@functools.lru_cache(maxsize=64)
def verdict_format(spec: str) -> VerdictFormat:
    """The format ``spec`` names: a name of :data:`VERDICTS`, or a regular expression with one
    group (its last match's group is the verdict: a number in [0, 1], or yes/no)."""
    if spec in VERDICTS:
        return VERDICTS[spec]
    names = ", ".join(VERDICTS)
    try:
        place = re.compile(spec)
    except re.error as error:
        raise ConfigError(
            f"reward.judge.verdict: {spec!r} is not one of {names} nor a regular expression ({error})"
        ) from None
    if place.groups != 1:
        raise ConfigError(
            f"reward.judge.verdict: the regular expression {spec!r} has {place.groups} groups; it needs exactly one, "
            f"around the verdict (or use one of {names})"
        )
    return VerdictFormat(place, words={"yes": 1.0, "no": 0.0})
