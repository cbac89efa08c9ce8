"""Responses that commit to two answers, invisible characters, number forms, and letters past Z.

A response that states two DIFFERENT answers (several `<answer>` tags, several `\\boxed{}`, several
"the answer is X" statements, or a mix) has no answer for a task with a single answer and scores 0;
the same answer stated twice keeps its score. Each row is: response, task, ground truth, options,
expected accuracy.
"""

from __future__ import annotations

import pytest

from easyvideor1.rewards import GroundTruthError, answer_instruction, extract_choice, parse_number
from tests.rewards.conftest import COLOURS

ZWSP, ZWJ, WORD_JOINER, BOM, SOFT_HYPHEN = "\u200b", "\u200d", "\u2060", "\ufeff", "\u00ad"

CASES = [
    # -- multiple choice: two different letters, in every recognised form and mixes of them
    ("\\boxed{A} \\boxed{B}", "multiple choice", "B", COLOURS, 0.0),
    ("\\boxed{B} \\boxed{A}", "multiple choice", "A", COLOURS, 0.0),
    ("The answer is A. The answer is B.", "multiple choice", "B", COLOURS, 0.0),
    ("The answer is A.\nThe final answer is B.", "multiple choice", "B", COLOURS, 0.0),
    ("<answer>A</answer> The answer is B.", "multiple choice", "A", COLOURS, 0.0),
    ("The answer is A. <answer>B</answer>", "multiple choice", "B", COLOURS, 0.0),
    ("<answer>A</answer> \\boxed{B}", "multiple choice", "A", COLOURS, 0.0),
    ("The answer is A. So \\boxed{B}", "multiple choice", "B", COLOURS, 0.0),
    ("<answer>The answer is A. The answer is B.</answer>", "multiple choice", "B", COLOURS, 0.0),
    ("<answer>\\boxed{A} \\boxed{B}</answer>", "multiple choice", "B", COLOURS, 0.0),
    ("<answer>A</answer><answer>B</answer>", "multiple choice", "B", COLOURS, 0.0),
    # the same letter stated twice, in one form or several, is one answer
    ("\\boxed{B} \\boxed{B}", "multiple choice", "B", COLOURS, 1.0),
    ("The answer is B. The answer is (B).", "multiple choice", "B", COLOURS, 1.0),
    ("<answer>B</answer> The answer is B because it is green.", "multiple choice", "B", COLOURS, 1.0),
    ("The answer is B. <answer>B. green</answer>", "multiple choice", "B", COLOURS, 1.0),
    ("<answer>The answer is \\boxed{B}</answer>", "multiple choice", "B", COLOURS, 1.0),
    ("<answer>B</answer><answer>(B)</answer>", "multiple choice", "B", COLOURS, 1.0),
    # drafts in the reasoning are not commitments
    ("<think>The answer is A? No.</think><answer>B</answer>", "multiple choice", "B", COLOURS, 1.0),
    # -- invisible characters are removed before answers are read: "A\u200bB" is the word "AB"
    (f"<answer>A{ZWSP}B</answer>", "multiple choice", "A", COLOURS, 0.0),
    (f"<answer>A{ZWSP}B</answer>", "multiple choice", "B", COLOURS, 0.0),
    (f"The answer is A{ZWJ}B", "multiple choice", "A", COLOURS, 0.0),
    (f"A{WORD_JOINER}B", "multiple choice", "B", COLOURS, 0.0),
    (f"<answer>{BOM}B{SOFT_HYPHEN}</answer>", "multiple choice", "B", COLOURS, 1.0),
    (f"<answer>1{SOFT_HYPHEN}2</answer>", "numerical", "12", None, 1.0),
    # -- numerical, counting, regression: two different numbers
    ("\\boxed{3} \\boxed{2}", "numerical", "2", None, 0.0),
    ("The answer is 3. The answer is 2.", "numerical", "2", None, 0.0),
    ("<answer>3</answer> The final answer is 2.", "numerical", "3", None, 0.0),
    ("\\boxed{3} \\boxed{3.0}", "numerical", "3", None, 1.0),
    ("<answer>3</answer> So the answer is 3 apples.", "numerical", "3", None, 1.0),
    ("\\boxed{4} \\boxed{5}", "counting", "5", None, 0.0),
    ("The answer is 4.\nAnswer: 5", "counting", "5", None, 0.0),
    ("\\boxed{5} \\boxed{5}", "counting", "5", None, 1.0),
    ("\\boxed{40} \\boxed{10}", "regression", "10", None, 0.0),
    # -- math
    ("\\boxed{3} \\boxed{2}", "math", "2", None, 0.0),
    ("The answer is 3. The answer is \\boxed{2}.", "math", "2", None, 0.0),
    ("<answer>x+1</answer> The final answer is x+2", "math", "x+1", None, 0.0),
    ("\\boxed{\\frac{1}{2}} \\boxed{\\frac{1}{2}}", "math", "\\frac{1}{2}", None, 1.0),
    ("The answer is 0.5, i.e. \\boxed{\\frac{1}{2}}", "math", "\\frac{1}{2}", None, 1.0),
    ("\\boxed{A} \\boxed{B}", "math", "B", COLOURS, 0.0),
    # -- yes/no
    ("The answer is yes. The answer is no.", "boolean", "no", None, 0.0),
    ("\\boxed{Yes} \\boxed{No}", "boolean", "no", None, 0.0),
    ("<answer>yes</answer> The answer is no.", "boolean", "yes", None, 0.0),
    ("<answer>no</answer> The answer is no, there is none.", "boolean", "no", None, 1.0),
    # -- number forms: hex, binary and octal literals are not decimal numbers (refused, never 0)
    ("<answer>0x5</answer>", "numerical", "0", None, 0.0),
    ("<answer>0b101</answer>", "numerical", "0", None, 0.0),
    ("<answer>0x5</answer>", "counting", "0", None, 0.0),
    ("<answer>0o7</answer>", "counting", "0", None, 0.0),
    ("<answer>0x5</answer>", "numerical", "5", None, 0.0),
    ("<answer>0.5</answer>", "numerical", "0.5", None, 1.0),
    ("<answer>0</answer>", "counting", "0", None, 1.0),
    # -- a percent sign means hundredths: 2% is 0.02, 200% is 2
    ("<answer>2\\%</answer>", "numerical", "2", None, 0.0),
    ("<answer>200\\%</answer>", "numerical", "2", None, 1.0),
    ("<answer>2%</answer>", "numerical", "2", None, 0.0),
    ("<answer>200%</answer>", "numerical", "2", None, 1.0),
    ("<answer>2%</answer>", "numerical", "2%", None, 1.0),
    ("<answer>0.02</answer>", "numerical", "2%", None, 1.0),
    ("<answer>2</answer>", "numerical", "2%", None, 0.0),
]


@pytest.mark.parametrize(("response", "task", "gold", "options", "expected"), CASES)
def test_two_answers_table(score, response: str, task: str, gold: str, options, expected: float) -> None:
    assert score(response, gold, task, options)["accuracy"] == expected


def test_committed_answers_lists_every_form_in_order() -> None:
    from easyvideor1.rewards.parsing import committed_answers  # new in this change

    body = "The answer is A. <answer>B</answer> so \\boxed{C}. Final answer: \\boxed{D}"
    assert [(c.text, c.source) for c in committed_answers(body)] == [
        ("A.", "final_statement"),
        ("B", "answer_tag"),
        ("C", "boxed"),
        ("D", "boxed"),
    ]
    # a box that is a statement's answer, or a tag's, is one commitment, not two
    assert [c.text for c in committed_answers("<answer>\\boxed{3}</answer>")] == ["3"]
    assert [c.text for c in committed_answers("The answer is $\\boxed{3}$.")] == ["3"]
    assert [c.text for c in committed_answers("Answer:\n\n  7 apples")] == ["7 apples"]
    assert committed_answers("no answer here") == []


def test_extract_answer_reports_textually_different_commitments() -> None:
    from easyvideor1.rewards.parsing import extract_answer

    answer = extract_answer("\\boxed{3} \\boxed{2}")
    assert [c.text for c in answer.candidates] == ["3", "2"]
    # the task's reader decides what "the same answer" is: 3 and 3.0 are one number, 3 and 2 two
    assert answer.read(parse_number) is None
    assert extract_answer("\\boxed{3} \\boxed{3.0}").read(parse_number) == parse_number("3")
    # prose that the reader cannot read is not an answer; a tag that it cannot read is a hedge
    assert extract_answer("<answer>3</answer> The answer is clear.").read(parse_number) == parse_number("3")
    assert extract_answer("<answer>3</answer><answer>unsure</answer>").read(parse_number) is None
    # tags with different text are flagged before any task reads them
    assert extract_answer("<answer>3</answer><answer>2</answer>").ambiguous


def test_zero_width_characters_do_not_split_a_word_into_letters() -> None:
    assert extract_choice(f"<answer>A{ZWSP}B</answer>", COLOURS).status != "ok"
    assert extract_choice(f"<answer>{ZWSP}C{ZWSP}</answer>", COLOURS).letter == "C"


def _unlabelled(count: int) -> list[str]:
    return [f"item {index}" for index in range(count)]


def test_twenty_six_unlabelled_options_are_lettered_a_to_z(score) -> None:
    options = _unlabelled(26)
    assert score("<answer>Z</answer>", "item 25", "multiple choice", options)["accuracy"] == 1.0
    assert "(A, B, C," in answer_instruction("multiple choice", options)
    assert ", or Z)" in answer_instruction("multiple choice", options)


def test_more_than_twenty_six_unlabelled_options_are_refused(score) -> None:
    options = _unlabelled(27)
    # before: option 27's text scored as A
    with pytest.raises(GroundTruthError, match="27 options"):
        score("<answer>item 26</answer>", "item 26", "multiple choice", options)
    with pytest.raises(GroundTruthError, match="27 options"):
        score("<answer>A</answer>", "A", "multiple choice", options)
    with pytest.raises(GroundTruthError, match="27 options"):
        answer_instruction("multiple choice", options)
