"""Answer instructions live with their reward task: every built-in declares one, aliases share it."""

from __future__ import annotations

from pathlib import Path

import pytest

from easyvideor1.rewards import (
    RewardConfig,
    answer_instruction,
    compute_score,
    registered_tasks,
    resolve_task,
    validate_problem_types,
)
from easyvideor1.rewards.instructions import GENERIC_INSTRUCTION, THINK_FIRST

BUILTINS = sorted(
    name for name, spec in registered_tasks().items() if spec.function.__module__.startswith("easyvideor1.")
)


@pytest.mark.parametrize("task", BUILTINS)
def test_every_builtin_task_declares_an_instruction(task: str) -> None:
    assert resolve_task(task).instruction is not None
    text = answer_instruction(task)
    assert "<answer></answer>" in text and text.endswith(".")


@pytest.mark.parametrize("task", BUILTINS)
def test_aliases_share_their_tasks_instruction(task: str) -> None:
    spec = resolve_task(task)
    for alias in spec.aliases:
        assert answer_instruction(alias) == answer_instruction(task)
        assert answer_instruction(alias.upper().replace("_", " ")) == answer_instruction(task)


def test_aliases_that_used_to_get_the_generic_instruction() -> None:
    assert answer_instruction("mcq") == answer_instruction("multiple choice")
    assert "letter" in answer_instruction("mcq")
    for alias in ("tvg", "temporal grounding", "Moment Retrieval"):
        assert '{"time": [start_seconds, end_seconds]}' in answer_instruction(alias)
    for alias in ("stvg", "spatiotemporal_grounding", "spatial-temporal grounding"):
        text = answer_instruction(alias)
        assert '"time"' in text and '"boxes"' in text and "[x1, y1, x2, y2]" in text
    assert (
        answer_instruction("SSR") == answer_instruction("CRR") == "Answer Yes or No inside <answer></answer>."
    )
    assert "whole number" in answer_instruction("REC")


def test_multiple_choice_names_the_letter_range() -> None:
    five = ["A. red", "B. green", "C. blue", "D. pink", "E. grey"]
    assert answer_instruction("multiple choice", five) == (
        "Answer with the option's letter (A, B, C, D, or E) inside <answer></answer>."
    )
    assert "(A or B)" in answer_instruction("mcq", ["A. yes", "B. no"])
    assert "(A, B, or C)" in answer_instruction("mcq", ["(A) x", "(B) y", "(C) z"])
    # unlabelled options are lettered by position, as the scorer reads them
    assert "(A, B, C, or D)" in answer_instruction("mcq", ["one", "two", "three", "four"])
    assert answer_instruction("mcq") == "Answer with the option's letter inside <answer></answer>."
    # math with options is scored by its letter, so it asks for one
    assert "(A or B)" in answer_instruction("math", ["A. 1", "B. 2"])
    assert "letter" not in answer_instruction("math")


def test_reasoning_prefix() -> None:
    assert (
        answer_instruction("boolean", reasoning=True)
        == THINK_FIRST + "answer Yes or No inside <answer></answer>."
    )


def test_unknown_type_gets_the_generic_instruction() -> None:
    assert answer_instruction("astrology") == GENERIC_INSTRUCTION
    assert answer_instruction("astrology", reasoning=True).startswith(THINK_FIRST)


def test_instructions_match_what_the_scorer_reads() -> None:
    # answering literally in the format each instruction asks for scores 1
    cases = [
        ("tvg", '{"time": [2.0, 5.0]}', '{"time": [2.0, 5.0]}'),
        (
            "stvg",
            '{"time": [1, 2], "boxes": {"1": [0, 0, 10, 10]}}',
            '{"time": [1, 2], "boxes": {"1": [0, 0, 10, 10]}}',
        ),
        ("spatial grounding", '{"boxes": [0, 0, 5, 5]}', '{"boxes": [0, 0, 5, 5]}'),
        ("tracking", '{"boxes": {"0": [0, 0, 5, 5]}}', '{"boxes": {"0": [0, 0, 5, 5]}}'),
        ("preference", "Response 2", "Response 2"),
        ("REC", "4", "4"),
        ("SSR", "Yes", "Yes"),
    ]
    for problem_type, answer, truth in cases:
        result = compute_score(f"<answer>{answer}</answer>", truth, problem_type)
        assert (result["accuracy"], result["format"]) == (1.0, 1.0), problem_type


USER_TASK = """
from easyvideor1.rewards import TaskScore, register_task

@register_task("colour name", aliases=["hue"], instruction="Name the colour inside <answer></answer>.")
def colour(sample):
    return TaskScore(float(sample.answer.text == sample.truth), True, sample.answer.text)

@register_task("plain user task")
def plain(sample):
    return TaskScore(1.0)
"""


def test_user_task_declares_its_own_instruction(tmp_path: Path) -> None:
    path = tmp_path / "colours.py"
    path.write_text(USER_TASK)
    validate_problem_types(["hue"], RewardConfig(task_files=[str(path)]))
    assert (
        answer_instruction("hue")
        == answer_instruction("Colour-Name")
        == "Name the colour inside <answer></answer>."
    )
    assert answer_instruction("plain user task") == GENERIC_INSTRUCTION


def test_instruction_must_be_text_or_function() -> None:
    from easyvideor1.rewards import register_task

    with pytest.raises(TypeError, match="instruction"):
        register_task("bad instruction task", instruction=42)  # type: ignore[arg-type]
