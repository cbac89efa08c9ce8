"""Question text -> the text the model sees: options block and answer-format instruction.

The instruction comes from the record's reward task (`easyvideor1.rewards.answer_instruction`).

Built-in templates are chosen by name (``data.prompt_template``); a path ending in ``.jinja`` is
rendered with the record's fields (``problem``, ``options``, ``problem_type``, and every extra
field), like EasyR1's ``format_prompt``.
"""

from __future__ import annotations

import functools
import os

from ..rewards.instructions import answer_instruction
from .records import Record


def format_question(record: Record, template: str = "plain") -> str:
    """The user text for ``record`` under ``template`` ("none", "plain", "reasoning" or a .jinja file)."""
    if template == "none":
        return record.problem
    if template.endswith(".jinja"):
        return _jinja(template).render(**record.to_dict())
    if template not in ("plain", "reasoning"):
        raise ValueError(f"unknown prompt template {template!r}: use none, plain, reasoning or a .jinja file")
    parts = [record.problem.strip()]
    if record.options:
        parts.append("Options:\n" + "\n".join(record.options))
    # The instruction is declared by the record's reward task, so the prompt asks for what is scored.
    parts.append(answer_instruction(record.problem_type, record.options, reasoning=template == "reasoning"))
    return "\n".join(parts)


@functools.lru_cache(maxsize=8)
def _jinja(path: str):
    import jinja2

    if not os.path.exists(path):
        raise FileNotFoundError(f"prompt template not found: {path}")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False)
    with open(path, encoding="utf-8") as f:
        return env.from_string(f.read())
