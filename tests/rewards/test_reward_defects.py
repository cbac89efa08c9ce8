"""Reward defects found by a differential check against other scorers (issue 10, item 10): one test each.

Each case failed on the scorer before the fix; the comment says what it used to do.
"""

from __future__ import annotations

import pytest

from easyvideor1.rewards import extract_choice, parse_number

from .conftest import COLOURS

# --------------------------------------------------------------------------- boolean


@pytest.mark.parametrize(
    ("response", "truth", "accuracy"),
    [
        # the first yes/no word decides; a later opposite word in the explanation does not cancel it
        ("<answer>Yes, there is no doubt.</answer>", "Yes", 1.0),  # was 0
        ("<answer>No, there is nothing there, yes.</answer>", "No", 1.0),  # was 0
        ("<answer>No. A yes would need a visible ball.</answer>", "No", 1.0),  # was 0
        ("The answer is yes, no doubt about it.", "Yes", 1.0),  # was 0
    ],
)
def test_boolean_first_polarity_word_decides(score, response: str, truth: str, accuracy: float) -> None:
    assert score(response, truth, "boolean")["accuracy"] == accuracy


@pytest.mark.parametrize(
    "response",
    [
        "Yes or no, I cannot tell.",  # was 1 against Yes (first word only)
        "<answer>Yes/No</answer>",
        "<answer>yes, no.</answer>",
        "<answer>No or maybe yes</answer>",
        "<answer>是或否</answer>",
    ],
)
@pytest.mark.parametrize("truth", ["Yes", "No"])
def test_boolean_both_polarities_are_a_hedge(score, response: str, truth: str) -> None:
    result = score(response, truth, "boolean")
    assert (result["accuracy"], result["prediction"]) == (0.0, None)


@pytest.mark.parametrize(
    ("response", "truth", "accuracy"),
    [
        ("<answer>1</answer>", "Yes", 1.0),  # was 0: "1" was a gold label but not an answer
        ("<answer>0</answer>", "0", 1.0),  # was 0
        ("<answer>0</answer>", "Yes", 0.0),
        ("<answer>Yes</answer>", "1", 1.0),
        ("<answer>No</answer>", "0", 1.0),
        ("<answer>10</answer>", "1", 0.0),
    ],
)
def test_boolean_digits_accepted_on_both_sides(score, response: str, truth: str, accuracy: float) -> None:
    assert score(response, truth, "boolean")["accuracy"] == accuracy


# --------------------------------------------------------------------------- multiple choice


@pytest.mark.parametrize(
    ("response", "letter"),
    [
        ("Answer: b", "B"),  # was no answer
        ("The answer is c because it is blue.", "C"),  # was no answer
        ("<answer>b. green</answer>", "B"),  # was no answer
        ("<answer>(d) yellow</answer>", "D"),
        ("Final answer: d.", "D"),
        ("B\n\nExplanation: the car is green, not red like A.", "B"),  # was A
        ("Option B is correct, not option A.", "B"),  # was A
        ("The answer is B, not A.", "B"),
        ("C is the correct option; A is not.", "C"),
        ("A is correct.", "A"),  # "A is ..." is the letter here, not the article
    ],
)
def test_letters_official_evaluators_read(response: str, letter: str) -> None:
    choice = extract_choice(response, COLOURS)
    assert (choice.letter, choice.status) == (letter, "ok")


HEDGES = ["A+B", "A -> B", "A|B|C|D", "(A)(B)(C)(D)", "B or maybe A", "A, or possibly B", "a or b"]


@pytest.mark.parametrize("hedge", HEDGES)
@pytest.mark.parametrize(
    "wrap", ["<answer>{}</answer>", "{}", "Final answer: {}", "I looked at it twice.\n{}"]
)
def test_several_letters_score_zero(score, hedge: str, wrap: str) -> None:
    # README: "a response naming several letters scores 0" (each used to credit one letter)
    for truth in "AB":
        result = score(wrap.format(hedge), truth, "multiple choice", COLOURS)
        assert (result["accuracy"], result["prediction"]) == (0.0, None), (hedge, wrap, truth)


@pytest.mark.parametrize("response", ["<answer>not A</answer>", "not A", "Definitely not option (A)."])
def test_a_ruled_out_letter_is_no_answer(score, response: str) -> None:
    for truth in "AB":
        assert score(response, truth, "multiple choice", COLOURS)["accuracy"] == 0.0


@pytest.mark.parametrize(
    "response",
    [
        "<answer>a dog</answer>",
        "a dog",
        "A dog runs across the field.",
        "The answer is a dog.",
        "Answer: a small dog",
        "It is a bird, e.g. a crow.",
        "Answer: e.g. nothing",
        "I think so.",
        "<answer>i think so</answer>",
    ],
)
def test_english_words_are_not_letters(response: str) -> None:
    assert extract_choice(response, [*COLOURS, "E. grey"]).letter is None


# --------------------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("25 m^2", 25.0),
        ("12 m^3", 12.0),
        ("25 m²", 25.0),
        ("25 m^{2}", 25.0),
        ("9.8 m/s^2", 9.8),
        ("2 cm**3", 2.0),
    ],
)
def test_unit_power_is_not_a_number(text: str, value: float) -> None:
    parsed = parse_number(text)  # "25 m^2" was two numbers (25 and 2), so no answer
    assert parsed is not None and parsed.value == value


def test_vsibench_room_size_in_square_metres(score) -> None:
    assert score("<answer>25 m^2</answer>", "25", "regression")["accuracy"] == 1.0  # was 0
    assert score("<answer>12 m^3</answer>", "12", "numerical")["accuracy"] == 1.0  # was 0
    assert parse_number("2^10") is None  # a power of a number is still two numbers


# --------------------------------------------------------------------------- preference


@pytest.mark.parametrize(
    ("truth", "response"),
    [
        ("Response A", "<answer>Response 1</answer>"),  # every such truth raised GroundTruthError
        ("Response B", "<answer>Response B</answer>"),
        ("Response 2", "<answer>Answer 2 is better</answer>"),
        ("Answer 1", "<answer>Response 1</answer>"),  # VL-RewardBench
        ("Tie", "<answer>tie</answer>"),
        ("Two responses are equally good", "<answer>Tie</answer>"),  # LLaVA-Critic
        ("Both are equally good", "<answer>Two responses are equally good.</answer>"),
        ("[[C]]", "<answer>Both responses are equally good</answer>"),  # MT-Bench tie
        ("B", "<answer>[[B]]</answer>"),
    ],
)
def test_preference_dataset_labels_parse(score, truth: str, response: str) -> None:
    result = score(response, truth, "preference")  # strict config: a GroundTruthError would raise
    assert result["accuracy"] == 1.0


@pytest.mark.parametrize("truth", ["Response A", "Tie", "Two responses are equally good"])
def test_preference_wrong_label_scores_zero(score, truth: str) -> None:
    assert score("<answer>Response 2</answer>", truth, "preference")["accuracy"] == 0.0
