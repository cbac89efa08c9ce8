"""Question text -> the text the model sees: options block and answer-format instruction.

The instruction comes from the record's reward task (`easyvideor1.rewards.answer_instruction`).

Built-in templates are chosen by name (``data.prompt_template``); a path ending in ``.jinja`` is
rendered with the record's fields (``problem``, ``options``, ``problem_type``, and every extra
field), like EasyR1's ``format_prompt``.
"""

from __future__ import annotations

import functools
import os
import re
from typing import Any

from ..rewards.instructions import answer_instruction
from .records import Record, RecordError


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


_PLACEHOLDER = re.compile(r"<(video|image)>")


def build_content(record: Record, text: str | None = None) -> list[dict[str, Any]]:
    """User-message content: media items at their ``<video>``/``<image>`` placeholders, in order.

    Without placeholders the media go first, then the text (the reference silently produced no
    vision tokens in that case). Placeholders must match the number of media of their kind.
    """
    text = record.problem if text is None else text
    kinds = _PLACEHOLDER.findall(text)
    n_video, n_image = kinds.count("video"), kinds.count("image")
    for kind, n, have in (("video", n_video, len(record.videos)), ("image", n_image, len(record.images))):
        if n and n != have:
            raise RecordError(
                record.source,
                f"{n} <{kind}> placeholder(s) but {have} {kind}(s)",
                "problem",
                record.problem_id,
            )
    content: list[dict[str, Any]] = []
    # media without placeholders of their kind go before the text
    if not n_image:
        content += [{"type": "image"} for _ in record.images]
    if not n_video:
        content += [{"type": "video"} for _ in record.videos]
    pos = 0
    for m in _PLACEHOLDER.finditer(text):
        if text[pos : m.start()]:
            content.append({"type": "text", "text": text[pos : m.start()]})
        content.append({"type": m.group(1)})
        pos = m.end()
    if text[pos:] or not content:
        content.append({"type": "text", "text": text[pos:]})
    return content
