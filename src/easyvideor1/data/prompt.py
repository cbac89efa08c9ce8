"""Question text -> the text the model sees: options block and answer-format instruction.

Built-in templates are chosen by name (``data.prompt_template``); a path ending in ``.jinja`` is
rendered with the record's fields (``problem``, ``options``, ``problem_type``, and every extra
field), like EasyR1's ``format_prompt``.
"""

from __future__ import annotations

import functools
import os

from .records import Record

_INSTRUCTION = {
    "multiple choice": "Answer with the option's letter inside <answer></answer>.",
    "numerical": "Give the number inside <answer></answer>.",
    "regression": "Give the number inside <answer></answer>.",
    "boolean": "Answer Yes or No inside <answer></answer>.",
    "ocr": "Give the text inside <answer></answer>.",
    "temporal grounding": 'Give {"time": [start_seconds, end_seconds]} inside <answer></answer>.',
    "spatial grounding": 'Give {"boxes": [x1, y1, x2, y2]} inside <answer></answer>.',
}
_THINK = "First think step by step inside <think></think>, then "


def _norm(problem_type: str) -> str:
    return problem_type.strip().lower().replace("_", " ").replace("-", " ")


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
    instruction = _INSTRUCTION.get(
        _norm(record.problem_type), "Give the final answer inside <answer></answer>."
    )
    if template == "reasoning":
        instruction = _THINK + instruction[0].lower() + instruction[1:]
    parts.append(instruction)
    return "\n".join(parts)


@functools.lru_cache(maxsize=8)
def _jinja(path: str):
    import jinja2

    if not os.path.exists(path):
        raise FileNotFoundError(f"prompt template not found: {path}")
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False)
    with open(path, encoding="utf-8") as f:
        return env.from_string(f.read())
