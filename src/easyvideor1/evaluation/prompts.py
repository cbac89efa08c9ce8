"""The generic evaluation prompt: the question, its options, and the task's answer instruction.

The instruction comes from the record's reward task (:func:`easyvideor1.rewards.answer_instruction`),
the same text training prompts use, so what the prompt asks for is what the scorer reads.
``direct`` asks for the answer only; ``thinking`` asks to reason first (inside ``<think>``) and then
answer. Benchmarks whose official evaluation builds its own prompt (OVO-Bench, MINERVA,
VideoReasonBench, ...) supply a prompt function in their spec instead (``benchmarks/``).
"""

from __future__ import annotations

import re

from ..data.records import Record
from ..rewards import answer_instruction

STYLES = ("direct", "thinking")


def check_style(style: str) -> None:
    if style not in STYLES:
        raise ValueError(f"unknown prompt style {style!r}: direct or thinking")


def question_text(record: Record) -> str:
    """The record's question with numbered image placeholders made plain (``<image 1>`` -> ``<image>``)."""
    return re.sub(r"<image \d+>", "<image>", record.problem).strip()


def render_prompt(record: Record, style: str = "direct") -> str:
    """The user text for ``record`` (media placeholders stay where the annotation put them)."""
    check_style(style)
    question = question_text(record) or "Describe the video in detail."
    if record.options:
        body = (
            "Select the best answer to the following multiple-choice question based on the video.\n"
            f"Question: {question}\nOptions:\n" + "\n".join(record.options)
        )
    else:
        body = f"Answer the following question based on the video.\nQuestion: {question}"
    instruction = answer_instruction(record.problem_type, record.options, reasoning=style == "thinking")
    return f"{body}\n{instruction}"
