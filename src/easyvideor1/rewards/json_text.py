"""JSON and numbers stated in model text: the JSON value a response states (the whole text, a
fenced block or a balanced span; Python-literal dicts too), and a value as a finite float. Used by
the tasks that read structured answers (temporal grounding, segmentation, geometry)."""

from __future__ import annotations

import ast
import json
import math
import re
import warnings
from typing import Any

# Possessive `\s*+`: a lazy body after a backtracking whitespace run was quadratic on "```" + "\n" * n.
_FENCE_RE = re.compile(r"```[a-zA-Z]*+\s*+(.*?)```", re.DOTALL)


def _balanced_spans(text: str) -> list[str]:
    """Outermost brace/bracket-balanced substrings of `text`, JSON strings respected."""
    spans, stack, start, in_string, escaped = [], [], -1, False, False
    pairs = {"}": "{", "]": "["}
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"' and stack:
            in_string = True
        elif char in "{[":
            if not stack:
                start = index
            stack.append(char)
        elif char in "}]" and stack:
            if stack[-1] != pairs[char]:
                stack.clear()
                continue
            stack.pop()
            if not stack:
                spans.append(text[start : index + 1])
    return spans


def _loads(candidate: str) -> Any:
    try:
        return json.loads(candidate)
    except (ValueError, RecursionError):
        pass
    try:  # Python-literal dicts with single quotes; literal_eval evaluates literals only
        with warnings.catch_warnings():  # model text is not our code: no SyntaxWarning noise
            warnings.simplefilter("ignore", SyntaxWarning)
            return ast.literal_eval(candidate)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def find_json(text: str) -> Any | None:
    """The JSON value stated in `text`: the whole text, else the last fenced block, else the last
    balanced `{...}`/`[...]` that parses. Returns None when nothing parses."""
    stripped = text.strip()
    if not stripped:
        return None
    value = _loads(stripped)
    if isinstance(value, (dict, list)):
        return value
    fenced = _FENCE_RE.findall(stripped)
    if fenced:
        value = _loads(fenced[-1].strip())
        if isinstance(value, (dict, list)):
            return value
    for span in reversed(_balanced_spans(stripped)):
        value = _loads(span)
        if isinstance(value, (dict, list)):
            return value
    return None


def finite_number(value: Any) -> float | None:
    """`value` as a finite float, or None (bools, NaN, infinities, strings that are not numbers)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        value = value.strip()
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None
