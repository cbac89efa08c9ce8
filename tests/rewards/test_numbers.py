"""Number parsing and the comparison rules (percent, tolerance)."""

from __future__ import annotations

import math

import pytest

from easyvideor1.rewards.numbers import ParsedNumber, numbers_match, parse_number, relative_error


@pytest.mark.parametrize(
    ("text", "value", "percent"),
    [
        ("12.97", 12.97, False),
        ("-3", -3.0, False),
        ("−2", -2.0, False),  # unicode minus
        ("+4", 4.0, False),
        (".5", 0.5, False),
        ("3.", 3.0, False),
        ("1,234", 1234.0, False),
        ("1,234.5", 1234.5, False),
        ("7,243,000", 7243000.0, False),
        ("1e3", 1000.0, False),
        ("2.5e-3 m", 0.0025, False),
        ("3/4", 0.75, False),
        ("\\frac{3}{4}", 0.75, False),
        ("\\dfrac{1}{8}", 0.125, False),
        ("50%", 50.0, True),
        ("10 \\%", 10.0, True),
        ("7 percent", 7.0, True),
        ("about 3 meters", 3.0, False),
        ("x = -5", -5.0, False),
        ("2 + 3 = 5", 5.0, False),
        ("4 (four)", 4.0, False),
        ("\\boxed{7}", 7.0, False),
        ("three", 3.0, False),
        ("twenty-one", 21.0, False),
        ("one hundred and five", 105.0, False),
        ("two thousand", 2000.0, False),
        ("zero", 0.0, False),
        ("v2 is 3", 3.0, False),
    ],
)
def test_parse_number(text: str, value: float, percent: bool) -> None:
    parsed = parse_number(text)
    assert parsed is not None
    assert parsed.value == pytest.approx(value)
    assert parsed.percent is percent


@pytest.mark.parametrize(
    "text",
    [
        "",
        "no number here",
        "3 or 4",
        "3-5",
        "between 3 and 5",
        "1,2",
        "12:30",
        "2023-01-05",
        "1/0",
        "There are 3 cats and 5 dogs in the video, and later 2 birds appear.",
        "The one on the left is bigger than the other one and the third",  # words only in short texts
    ],
)
def test_no_single_number(text: str) -> None:
    assert parse_number(text) is None


@pytest.mark.parametrize(
    ("prediction", "truth", "match"),
    [
        # a percent sign means hundredths: one value per answer, never both readings (issue 21)
        ("50%", "50", False),
        ("50%", "0.5", True),
        ("0.5", "50%", True),
        ("50", "50%", False),
        ("50%", "50%", True),
        ("200%", "2", True),
        ("2%", "2", False),
        ("10 \\%", "0.1", True),
        ("5", "50%", False),
        ("0.05", "50", False),
        ("12.97", "12.97", True),
        ("13.0", "12.97", True),  # 0.23 % off: within 0.5 %
        ("13.1", "12.97", False),  # 1 % off
        ("0.29", "0.286", False),  # 1.4 % off
        ("101", "100", False),  # an off-by-one count is wrong
        ("1000", "1004", True),
        ("0", "0", True),
        ("0.0000001", "0", True),  # absolute tolerance 1e-6 near zero
        ("0.001", "0", False),
        ("-3", "3", False),
    ],
)
def test_numbers_match(prediction: str, truth: str, match: bool) -> None:
    p, t = parse_number(prediction), parse_number(truth)
    assert p is not None and t is not None
    assert numbers_match(p, t, rel_tol=0.005, abs_tol=1e-6) is match


def test_relative_error() -> None:
    assert relative_error(ParsedNumber(1.5), ParsedNumber(1.0)) == pytest.approx(0.5)
    assert relative_error(ParsedNumber(50, True), ParsedNumber(0.5)) == 0.0
    assert relative_error(ParsedNumber(0.0), ParsedNumber(0.0)) == 0.0
    assert math.isinf(relative_error(ParsedNumber(1.0), ParsedNumber(0.0)))
