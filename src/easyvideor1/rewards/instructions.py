"""Answer instructions: the text after a question that asks for the answer in the form its task scores.

Each task declares its instruction where it is scored (`@register_task(..., instruction=...)`), so
the training prompt (`data/prompt.py`), the evaluation prompts and the scorer cannot drift apart;
aliases ("mcq", "tvg", "stvg", "SSR", "REC", ...) resolve to their task and share its instruction.
"""

from __future__ import annotations

from easyvideor1.rewards.registry import UnknownTaskError, resolve_task

GENERIC_INSTRUCTION = "Give the final answer inside <answer></answer>."
THINK_FIRST = "First think step by step inside <think></think>, then "


def answer_instruction(
    problem_type: str, options: list[str] | None = None, *, reasoning: bool = False
) -> str:
    """The answer-format instruction for a question of `problem_type`.

    Args:
        problem_type: task name or any alias/spelling ("multiple choice", "mcq", "tvg", "SSR", ...).
        options: the record's options; multiple choice names their letter range ("(A, B, C, or D)").
        reasoning: prefix a think-first clause ("First think step by step inside <think></think>, then ...").

    Returns:
        The instruction; for an unknown type, or a registered task without an instruction, the
        generic "Give the final answer inside <answer></answer>." (a prompt must always render;
        unknown types are rejected at start-up by `validate_problem_types`, not here).
    """
    try:
        declared = resolve_task(problem_type).instruction
    except UnknownTaskError:
        declared = None
    text = declared(list(options) if options else None) if callable(declared) else declared
    text = (text or "").strip() or GENERIC_INSTRUCTION
    if reasoning:
        text = THINK_FIRST + text[0].lower() + text[1:]
    return text
