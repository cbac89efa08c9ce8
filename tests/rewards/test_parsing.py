"""Shared extraction helpers."""

from __future__ import annotations

import pytest

from easyvideor1.rewards.json_text import find_json
from easyvideor1.rewards.parsing import (
    clean_short_answer,
    extract_answer,
    final_statement,
    has_reasoning,
    last_boxed,
    parse_ground_truth,
    strip_think,
)


@pytest.mark.parametrize(
    ("text", "body"),
    [
        ("<think>a</think>b", "b"),
        ("<think>a</think>b<think>c</think>d", "bd"),
        ("reasoning opened by the template</think>answer", "answer"),
        ("answer <think>truncated", "answer "),
        ("<think>only reasoning", ""),
        ("<THINK>x</THINK>y", "y"),
        ("no reasoning at all", "no reasoning at all"),
    ],
)
def test_strip_think(text: str, body: str) -> None:
    assert strip_think(text) == body


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>x</think><answer>A</answer>", True),
        ("x</think><answer>A</answer>", True),
        ("<think>  </think><answer>A</answer>", False),
        ("<answer>A</answer><think>late</think>", False),
        ("<answer>A</answer>", False),
    ],
)
def test_has_reasoning(text: str, expected: bool) -> None:
    assert has_reasoning(text) is expected


@pytest.mark.parametrize(
    ("text", "statement"),
    [
        ("Therefore, the final answer is: 42.", "42."),
        ("the answer is \\boxed{x^2}", "x^2"),
        ("**Final Answer**: (C)", "(C)"),
        ("Final answer:\n\n  B", "B"),
        ("The correct option is D", "D"),
        ("答案是 3", "3"),
        ("The answer choices are A to D.", None),
        ("no statement", None),
        ("Answer: first\nlater the final answer is: second", "second"),
    ],
)
def test_final_statement(text: str, statement: str | None) -> None:
    assert final_statement(text) == statement


def test_last_boxed_is_brace_balanced() -> None:
    assert last_boxed("\\boxed{1} then \\boxed{\\frac{a}{b}}") == "\\frac{a}{b}"
    assert last_boxed("\\boxed{unclosed") is None


@pytest.mark.parametrize(
    ("response", "text", "source"),
    [
        ("<answer> B </answer>", "B", "answer_tag"),
        ("<think>x</think>The final answer is 7", "7", "final_statement"),
        ("so \\boxed{7}", "7", "boxed"),
        ("just text", "just text", "text"),
        ("<think>all reasoning</think>", None, "none"),
        ("", None, "none"),
        ("<answer></answer>fallback", "<answer></answer>fallback", "text"),
    ],
)
def test_extract_answer(response: str, text: str | None, source: str) -> None:
    answer = extract_answer(response)
    assert (answer.text, answer.source) == (text, source)


def test_extract_answer_flags_different_tags() -> None:
    assert extract_answer("<answer>1</answer><answer>2</answer>").ambiguous
    assert not extract_answer("<answer>1</answer><answer> 1 </answer>").ambiguous


@pytest.mark.parametrize(
    ("ground_truth", "answer"),
    [
        ("<answer>B</answer>", "B"),
        ("B", "B"),
        ("  12.5 ", "12.5"),
        ("$\\frac{1}{2}$", "\\frac{1}{2}"),
        ("$$x+1$$", "x+1"),
        (
            '<think>{"time": [1, 2], "boxes": {}}</think><[PLHD21_never_used_51bce0c785ca2f68081bfa7d91973934]>',
            '{"time": [1, 2], "boxes": {}}',
        ),
        ("<think>reasoning</think>final", "final"),
        ({"time": [1, 2]}, '{"time": [1, 2]}'),
    ],
)
def test_parse_ground_truth(ground_truth, answer: str) -> None:
    assert parse_ground_truth(ground_truth) == answer


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('{"a": 1}', {"a": 1}),
        ('text {"a": 1} more {"b": [1, {"c": "}"}]} end', {"b": [1, {"c": "}"}]}),
        ('```json\n{"a": 2}\n```', {"a": 2}),
        ("{'a': 3}", {"a": 3}),
        ("[1, 2]", [1, 2]),
        ('{"a": 1', None),
        ("no json", None),
        ("", None),
        ("{" * 5000, None),
        ("[" * 100000 + "]" * 100000, None),  # too deep for the parsers: no answer, no crash
    ],
)
def test_find_json(text: str, value) -> None:
    assert find_json(text) == value


@pytest.mark.parametrize(
    ("text", "clean"),
    [
        ("$\\boxed{\\text{B}}$.", "B"),
        ("**yes**", "yes"),
        ("“Paris”", "Paris"),
        ("`x = 1`;", "x = 1"),
        ("  B.  ", "B"),
    ],
)
def test_clean_short_answer(text: str, clean: str) -> None:
    assert clean_short_answer(text) == clean


_OPTIONS = ["A. red", "B. green", "C. blue"]


@pytest.mark.parametrize(
    ("response", "truth", "problem_type", "options", "prediction"),
    [
        ("Ｂ", "B", "multiple choice", _OPTIONS, "B"),
        ("（Ｂ）", "B", "multiple choice", _OPTIONS, "B"),
        ("答案是Ｂ", "B", "multiple choice", _OPTIONS, "B"),
        ("<answer>Ｂ</answer>", "B", "multiple choice", _OPTIONS, "B"),
        ("答案：（Ｃ）。", "C", "multiple choice", _OPTIONS, "C"),
        ("１２．５", "12.5", "numerical", None, "12.5"),
        ("<answer>１２．５</answer>", "12.5", "numerical", None, "12.5"),
        ("答案是１２．５", "12.5", "numerical", None, "12.5"),
        # an ASCII answer in a response whose other text NFKC changes (x², ①, ｆｕｌｌ) reads as it was
        ("x² grows; ① ｆｕｌｌ width aside, <answer>B</answer>", "B", "multiple choice", _OPTIONS, "B"),
        ("x² is 6.25 here, so <answer>12.5</answer>", "12.5", "numerical", None, "12.5"),
    ],
)
def test_fullwidth_answers_read_as_ascii(response, truth, problem_type, options, prediction) -> None:
    from easyvideor1.rewards import compute_score

    result = compute_score(response, truth, problem_type, options)
    assert (result["accuracy"], str(result["prediction"])) == (1.0, prediction)


@pytest.mark.parametrize(
    "response",
    [
        "<answer>B</answer>",
        "The answer is (C).",
        "12.5 \\boxed{3/4}",
        "x\ty\r\n",
        # only width forms are unified: superscripts, fractions, ligatures and CJK punctuation stay
        "<answer>O(n²)</answer>",
        "The answer is Cu²⁺, ½ of ﬁve。",
    ],
)
def test_reading_form_changes_only_width_forms(response) -> None:
    from easyvideor1.rewards.parsing import reading_form

    assert reading_form(response) == response
    assert (
        extract_answer(response).text == extract_answer(response.replace("B", "Ｂ").replace("C", "Ｃ")).text
    )
