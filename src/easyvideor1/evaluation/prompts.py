"""Evaluation prompts: the question, its options, and an answer-format instruction per style.

``direct`` asks for the answer only (Qwen3-VL's instruct evaluation style); ``thinking`` asks for
brief reasoning and a final ``<answer>``. The option-letter range follows the record's options
(the reference always said "(A, B, C, or D)", even for ten options).
"""

from __future__ import annotations

import re

from ..data.records import Record

_GROUNDING = {"temporal grounding", "spatial-temporal grounding", "spatial grounding", "tracking"}


def _letters(options: list[str]) -> str:
    letters = [o.strip()[0] for o in options if o.strip()]
    return ", ".join(letters[:-1]) + f", or {letters[-1]}" if len(letters) > 1 else "".join(letters)


def render_prompt(record: Record, style: str = "direct") -> str:
    """The user text for ``record`` (media placeholders stay where the annotation put them)."""
    if style not in ("direct", "thinking"):
        raise ValueError(f"unknown prompt style {style!r}: direct or thinking")
    question = re.sub(r"<image \d+>", "<image>", record.problem).strip() or "Describe the video in detail."
    ptype = record.problem_type.strip().lower().replace("_", " ")
    if record.options:
        body = (
            f"Select the best answer to the following multiple-choice question based on the video.\n"
            f"Question: {question}\nOptions:\n" + "\n".join(record.options)
        )
        tail = f"Answer with the option's letter ({_letters(record.options)})"
    elif ptype in _GROUNDING:
        body = f"Answer the following question based on the video.\nQuestion: {question}"
        tail = 'Answer with JSON such as {"time": [start_seconds, end_seconds]}'
        if ptype != "temporal grounding":
            tail = 'Answer with JSON such as {"time": [start, end], "boxes": {"second": [x1, y1, x2, y2]}}'
    else:
        body = f"Answer the following question based on the video.\nQuestion: {question}"
        tail = "Answer with a short phrase or number"
    if style == "thinking":
        return f"{body}\nThink briefly, then {tail[0].lower() + tail[1:]} inside <answer></answer>."
    return f"{body}\n{tail} inside <answer></answer>."
