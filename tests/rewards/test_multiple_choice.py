"""Multiple choice: extraction priorities and hack resistance."""

from __future__ import annotations

import pytest

from easyvideor1.rewards import extract_choice
from easyvideor1.rewards.tasks.multiple_choice import option_texts, priority_letter

from .conftest import COLOURS

# (response, letter, status) with the four colour options; letter None when there is no answer.
EXTRACTION_CASES = [
    # answer tag first
    ("<answer>B</answer>", "B", "ok"),
    ("<answer> b </answer>", "B", "ok"),
    ("<answer>(C)</answer>", "C", "ok"),
    ("<answer>[D]</answer>", "D", "ok"),
    ("<answer>B. green</answer>", "B", "ok"),
    ("<answer>B: green</answer>", "B", "ok"),
    ("<answer>(B) green</answer>", "B", "ok"),
    ("<answer>**B**</answer>", "B", "ok"),
    ("<answer>$\\boxed{C}$</answer>", "C", "ok"),
    ("<answer>Option C</answer>", "C", "ok"),
    ("<answer>green</answer>", "B", "ok"),
    ("<answer>Yellow.</answer>", "D", "ok"),
    ("<answer>The answer is C because it is blue.</answer>", "C", "ok"),
    ("<ANSWER>A</ANSWER>", "A", "ok"),
    ("<think>A looks right</think><answer>D</answer>", "D", "ok"),
    ("<think>draft <answer>A</answer></think><answer>C</answer>", "C", "ok"),
    ("<answer>B</answer><answer>B</answer>", "B", "ok"),
    # several letters named as the answer: no answer
    ("<answer>A or B</answer>", None, "ambiguous"),
    ("<answer>A, C</answer>", None, "ambiguous"),
    ("<answer>A/B</answer>", None, "ambiguous"),
    ("<answer>A and D</answer>", None, "ambiguous"),
    ("<answer>A B C D</answer>", None, "ambiguous"),
    ("<answer>A</answer> wait <answer>B</answer>", None, "ambiguous"),
    ("<answer>B. red</answer>", None, "ambiguous"),
    ("Final answer: A or B", None, "ambiguous"),
    ("The final answer is C, D", None, "ambiguous"),
    ("I think the answer might be A or B", None, "ambiguous"),
    ("A or B", None, "ambiguous"),
    # letters beyond the options
    ("<answer>E</answer>", "E", "out_of_range"),
    ("<answer>J</answer>", "J", "out_of_range"),
    ("The final answer is F", "F", "out_of_range"),
    # explicit final statements
    ("I think it's a cat. Therefore, the final answer is: C", "C", "ok"),
    ("Therefore, the final answer is: $\\boxed{D}$.", "D", "ok"),
    ("the final answer is B", "B", "ok"),
    ("The best answer is: D.", "D", "ok"),
    ("The correct option is (B).", "B", "ok"),
    ("**Final Answer:** (A)", "A", "ok"),
    ("Final answer:\nC", "C", "ok"),
    ("The answer is B because the man is tall.", "B", "ok"),
    ("答案是C", "C", "ok"),
    ("I considered A. Then B. The final answer is D", "D", "ok"),
    ("The answer is: blue", "C", "ok"),
    # lmms-eval-style priority rules
    ("B", "B", "ok"),
    ("(C)", "C", "ok"),
    ("C.", "C", "ok"),
    ("D) yellow", "D", "ok"),
    ("B. The ball is green", "B", "ok"),
    ("Looking at option A, it's wrong. Option B is also wrong. So C.", "C", "ok"),
    ("The ball looks green to me, so I choose B", "B", "ok"),
    ("After watching, (A) is wrong and (C) is right", "C", "ok"),
    ("<think>A? no</think>D", "D", "ok"),
    ("Option A: red. Option B: green. The ball is green: B", "B", "ok"),
    # the article "a" and the pronoun "I" are not options
    ("A man is walking with a red ball.", None, "no_answer"),
    ("a", None, "no_answer"),
    ("I think it is a ball.", None, "no_answer"),
    ("It is a green ball, a nice one", None, "no_answer"),
    ("There is a dog and a cat.", None, "no_answer"),
    # nothing to find
    ("", None, "no_answer"),
    ("   \n  ", None, "no_answer"),
    ("<answer>I cannot tell</answer>", None, "no_answer"),
    ("<think>B B B B</think>", None, "no_answer"),
    ("<think>unterminated reasoning that names B", None, "no_answer"),
    ("The video is too dark to decide.", None, "no_answer"),
]


@pytest.mark.parametrize(("response", "letter", "status"), EXTRACTION_CASES)
def test_extract_choice(response: str, letter: str | None, status: str) -> None:
    choice = extract_choice(response, COLOURS)
    assert (choice.letter, choice.status) == (letter, status)


@pytest.mark.parametrize(
    ("response", "accuracy", "format_score"),
    [
        ("<think>green</think><answer>B</answer>", 1.0, 1.0),
        ("<answer>green</answer>", 1.0, 1.0),
        ("<answer>A</answer>", 0.0, 1.0),
        ("<answer>A or B</answer>", 0.0, 0.5),
        ("<answer>B</answer><answer>A</answer>", 0.0, 0.5),
        ("<answer>The answer is B</answer>", 1.0, 0.5),
        ("<answer>E</answer>", 0.0, 0.5),
        ("The final answer is B", 1.0, 0.0),
        ("B", 1.0, 0.0),
        ("", 0.0, 0.0),
        ("<answer></answer>", 0.0, 0.0),
        ("A man holds a green ball", 0.0, 0.0),
    ],
)
def test_score_multiple_choice(score, response: str, accuracy: float, format_score: float) -> None:
    result = score(response, "<answer>B</answer>", "multiple choice", COLOURS)
    assert (result["accuracy"], result["format"]) == (accuracy, format_score)
    assert result["overall"] == pytest.approx(0.9 * accuracy + 0.1 * format_score)


def test_prediction_tells_no_answer_from_wrong(score) -> None:
    assert score("<answer>C</answer>", "B", "multiple choice", COLOURS)["prediction"] == "C"
    assert score("no idea", "B", "multiple choice", COLOURS)["prediction"] is None


@pytest.mark.parametrize(
    ("options", "response", "letter"),
    [
        (["A: Messi", "B: Ronaldo", "C: Neymar"], "<answer>Ronaldo</answer>", "B"),  # LiveSports style
        (["(A) cat", "(B) dog"], "<answer>dog</answer>", "B"),
        (["cat", "dog", "bird"], "<answer>bird</answer>", "C"),  # unlabelled options: by position
        (["A. 10.0", "B. 5.0", "C. 12.0"], "<answer>5</answer>", "B"),  # numeric option text
        (["A. Apples.", "B. Candles."], "<answer>candles</answer>", "B"),
        (["A. 红色", "B. 绿色"], "<answer>绿色</answer>", "B"),
    ],
)
def test_option_text_matching(options: list[str], response: str, letter: str) -> None:
    assert extract_choice(response, options).letter == letter


def test_letters_beyond_option_count_are_wrong(score) -> None:
    two = ["A. yes", "B. no"]  # VideoMathQA's two-option records
    assert extract_choice("<answer>C</answer>", two).status == "out_of_range"
    assert (
        score("<answer>C</answer>", "<answer>C</answer>", "multiple choice", ["A. x", "B. y", "C. z"])[
            "accuracy"
        ]
        == 1
    )
    assert extract_choice("The answer is B. C is wrong.", two).letter == "B"


def test_without_options_letters_a_to_j() -> None:
    assert extract_choice("<answer>J</answer>").status == "ok"
    assert extract_choice("<answer>K</answer>").status == "out_of_range"


def test_priority_rules_prefer_higher_priority_then_last() -> None:
    assert priority_letter("It could be (A), but (B) fits better") == "B"  # same priority: last wins
    assert priority_letter("C. ... and then (A)") == "C"  # start (10) beats parentheses (6)
    assert priority_letter("maybe (A) ... answer: D") == "D"  # phrase (7) beats parentheses (6)


def test_option_labels() -> None:
    assert option_texts(["A. Red.", "B: Blue", "(C) Green"]) == {"A": "red", "B": "blue", "C": "green"}


def test_malformed_ground_truth_is_an_error(score) -> None:
    from easyvideor1.rewards import GroundTruthError

    with pytest.raises(GroundTruthError):
        score("<answer>A</answer>", "<answer>A or B</answer>", "multiple choice", COLOURS)


def test_very_long_response_is_fast_and_correct(score) -> None:
    reasoning = "Option A is unlikely. Option B might be. (C) is wrong. " * 2000
    result = score(
        f"<think>{reasoning}</think>Therefore, the final answer is: B", "B", "multiple choice", COLOURS
    )
    assert result["accuracy"] == 1.0
    assert extract_choice(reasoning + " So the answer is D", COLOURS).letter == "D"
