"""The training prompt: question, options block, and the instruction of the record's reward task."""

from __future__ import annotations

import pytest

from easyvideor1.data.prompt import format_question
from easyvideor1.data.records import Record
from easyvideor1.rewards import answer_instruction


def _record(problem_type: str, options: list[str] | None = None) -> Record:
    return Record(problem="What happens?", answer="x", problem_type=problem_type, options=options)


@pytest.mark.parametrize(
    "problem_type", ["mcq", "tvg", "stvg", "spatiotemporal_grounding", "SSR", "REC", "ocr"]
)
def test_plain_prompt_ends_with_the_task_instruction(problem_type: str) -> None:
    options = ["A. red", "B. green", "C. blue"] if problem_type == "mcq" else None
    text = format_question(_record(problem_type, options), "plain")
    assert text.endswith("\n" + answer_instruction(problem_type, options))
    assert text.startswith("What happens?")


def test_options_block_and_letter_range() -> None:
    text = format_question(_record("multiple choice", ["A. red", "B. green", "C. blue"]))
    assert text == (
        "What happens?\nOptions:\nA. red\nB. green\nC. blue\n"
        "Answer with the option's letter (A, B, or C) inside <answer></answer>."
    )


def test_reasoning_template_and_none() -> None:
    record = _record("tvg")
    assert format_question(record, "reasoning").endswith(answer_instruction("tvg", reasoning=True))
    assert format_question(record, "none") == "What happens?"
    with pytest.raises(ValueError, match="unknown prompt template"):
        format_question(record, "fancy")


def test_unknown_type_still_renders() -> None:
    assert format_question(_record("astrology")).endswith("Give the final answer inside <answer></answer>.")
