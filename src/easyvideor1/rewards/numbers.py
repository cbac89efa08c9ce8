"""Numbers in answers: parsing (digits, fractions, percentages, English number words) and comparison.

Rules (documented in the README and tested):
* An answer names one number. Text that names several different numbers ("3 or 4", "between 3 and
  5", a rambling paragraph) names none: the first number of a text is not its answer. Repeating the
  same value ("4 (four)") is fine. With an `=`, the part after the last `=` is the answer ("x = 5").
* The forms read are decimal: integers, decimals, exponents ("1e3"), fractions ("3/4",
  "\\frac{3}{4}"), thousands separators in groups of three ("1,234" is 1234; "1,2" is two numbers),
  and English number words in short answers. Hexadecimal, binary and octal literals ("0x5",
  "0b101", "0o7") are refused: an answer holding one names no number (it scores 0, never as 0).
* The power of a unit is not a number: "25 m^2" and "12 m^3" read 25 and 12 (VSI-Bench room sizes
  are in m^2; "m²" never was a digit).
* A percent sign ("%", "\\%", "percent") means hundredths, on either side: "50%" is the quantity
  0.5, so it equals "0.5" and "50%" but not "50", and "200%" equals "2" while "2%" does not. One
  answer has one value: it is never compared both with and without the sign.
* Equality is `|pred - gt| <= max(abs_tol, rel_tol * |gt|)` (defaults 1e-6 and 0.5 %).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# No lazy group next to optional whitespace here: "\frac{1" + " " * n + "x" was quadratic.
_FRAC_RE = re.compile(r"\\[dt]?frac\s*+\{([^{}]*)\}\s*+\{([^{}]*)\}")
_NUMBER_RE = re.compile(
    r"(?<![\w.])(?P<sign>[-+−]?)"
    r"(?P<int>\d{1,3}(?:,\d{3})+|\d+)?(?P<frac>\.\d+)?(?(int)|(?(frac)|(?!)))"
    r"(?:[eE](?P<exp>[-+]?\d{1,3}))?"
    r"(?:\s*+/\s*+(?P<den>\d+(?:\.\d+)?))?"
    r"(?P<pct>\s*+(?:%|\\%|percent\b))?"
)
# The power of a unit ("25 m^2", "12 m^3", "m^{2}", "m**2") is part of the unit, not a number:
# removed before numbers are read. A power right after a letter only: "10^3" stays a number's.
_UNIT_POWER_RE = re.compile(r"(?<=[^\W\d_])\s*+(?:\^\s*+\{?\s*+[-+]?\d+\s*+\}?|\*\*\s*+\d+)")
_UNITS = {
    "zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14, "fifteen": 15,
    "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30,
    "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
}  # fmt: skip
_SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000, "billion": 1_000_000_000}
_WORD_RE = re.compile(r"[a-z]+")
# "0x5", "0b101", "0o7" (and their upper-case and digit-grouped forms) are not decimal numbers.
_NON_DECIMAL_RE = re.compile(r"(?<![\w.])[-+−]?0[xXbBoO][0-9A-Fa-f_]")
# Number words are read only from short answers: in a sentence "one" is usually a pronoun.
_MAX_WORDS_FOR_NUMBER_WORDS = 6


@dataclass(frozen=True)
class ParsedNumber:
    """A number stated in an answer; `percent` records a trailing percent sign.

    `value` is the number as written ("50%" has value 50); `quantity` is what it means (0.5).
    """

    value: float
    percent: bool = False

    @property
    def quantity(self) -> float:
        return self.value / 100 if self.percent else self.value


def _digit_numbers(text: str) -> list[ParsedNumber]:
    numbers = []
    text = _UNIT_POWER_RE.sub("", _FRAC_RE.sub(r" \1 / \2 ", text))
    for match in _NUMBER_RE.finditer(text.replace("(", " ").replace(")", " ")):
        literal = (match.group("int") or "0").replace(",", "") + (match.group("frac") or "")
        try:
            value = float(literal + (f"e{match.group('exp')}" if match.group("exp") else ""))
            if match.group("den"):
                denominator = float(match.group("den"))
                if denominator == 0:
                    continue
                value /= denominator
        except (ValueError, OverflowError):
            continue
        if match.group("sign") in ("-", "−"):
            value = -value
        if math.isfinite(value):
            numbers.append(ParsedNumber(value, bool(match.group("pct"))))
    return numbers


def _word_numbers(text: str) -> list[ParsedNumber]:
    """Values of maximal runs of English number words ("twenty-one", "one hundred and five")."""
    numbers, total, current, in_run = [], 0, 0, False
    for word in [*_WORD_RE.findall(text.lower()), ""]:
        if word in _UNITS:
            current, in_run = current + _UNITS[word], True
        elif word in _SCALES and in_run:
            if _SCALES[word] == 100:
                current *= 100
            else:
                total, current = total + current * _SCALES[word], 0
        elif word == "and" and in_run:
            continue
        elif in_run:
            numbers.append(ParsedNumber(float(total + current)))
            total, current, in_run = 0, 0, False
    return numbers


def find_numbers(text: str) -> list[ParsedNumber]:
    """Every number stated in `text` (digits first; number words only in short texts without digits)."""
    numbers = _digit_numbers(text)
    if not numbers and len(text.split()) <= _MAX_WORDS_FOR_NUMBER_WORDS:
        numbers = _word_numbers(text)
    return numbers


def parse_number(text: str) -> ParsedNumber | None:
    """The single number an answer states, or None (no number, several different ones, or a
    hexadecimal, binary or octal literal)."""
    if _NON_DECIMAL_RE.search(text):
        return None
    if "=" in text:
        text = text.rsplit("=", 1)[1]
    numbers = find_numbers(text)
    if not numbers:
        return None
    first = numbers[0]
    if any(not math.isclose(n.value, first.value, rel_tol=1e-12, abs_tol=1e-12) for n in numbers[1:]):
        return None
    return ParsedNumber(first.value, any(n.percent for n in numbers))


def same_number(first: ParsedNumber, second: ParsedNumber) -> bool:
    """Whether two stated numbers are the same quantity ("3" and "3.0", "50%" and "0.5")."""
    return math.isclose(first.quantity, second.quantity, rel_tol=1e-9, abs_tol=1e-12)


def numbers_match(prediction: ParsedNumber, reference: ParsedNumber, rel_tol: float, abs_tol: float) -> bool:
    """True when `prediction` equals `reference` within `max(abs_tol, rel_tol * |reference|)`."""
    tolerance = max(abs_tol, rel_tol * abs(reference.quantity))
    return abs(prediction.quantity - reference.quantity) <= tolerance


def relative_error(prediction: ParsedNumber, reference: ParsedNumber) -> float:
    """Relative error of `prediction` to `reference` (as quantities: a percent sign is hundredths)."""
    scale = abs(reference.quantity)
    error = abs(prediction.quantity - reference.quantity)
    if scale == 0:
        return 0.0 if error == 0 else math.inf
    return error / scale
