"""Rule-based scoring is linear and bounded: adversarial 1 MB responses, per parser and per task.

Each case asserts under 2 s of this process's CPU time (not wall time, so a loaded machine does
not fail it); the parsers take milliseconds, so the margin is wide. Before the fix `last_boxed`
took 69 s on `"\\boxed{" * 16000` (112 KB) and the tag, fence, fraction, time-range and letter
patterns were quadratic or worse.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from easyvideor1.rewards import RewardConfig, compute_score, extract_choice, parse_number
from easyvideor1.rewards.geometry import parse_span_text
from easyvideor1.rewards.json_text import find_json
from easyvideor1.rewards.parsing import (
    MAX_SCORED_CHARS,
    answer_tag_contents,
    extract_answer,
    final_statement,
    has_reasoning,
    last_boxed,
    scored_tail,
    strip_think,
)
from easyvideor1.rewards.tasks.boolean import read_polarity
from easyvideor1.rewards.tasks.preference import read_label

from .conftest import COLOURS

SIZE = 1_000_000
LIMIT_S = 2.0


def fill(unit: str, size: int = SIZE) -> str:
    return (unit * (size // len(unit) + 1))[:size]


def cpu_seconds(function: Callable[..., Any], *args: Any, **kwargs: Any) -> float:
    start = time.process_time()
    function(*args, **kwargs)
    return time.process_time() - start


BANK: dict[str, list[str]] = {
    "boxed": [fill("\\boxed{"), fill("\\boxed{\\fbox{{"), "\\boxed" + " " * SIZE, fill("{}\\boxed{")],
    "tags": [
        fill("<answer>"),
        fill("</answer>"),
        fill("<answer>x"),
        fill("<think>"),
        fill("<think></think><think>"),
    ],
    "json": [
        fill("{"),
        fill("[1,"),
        fill('{"a":'),
        fill('"'),
        fill("{'a': ["),
        "```" + "\n" * SIZE,
        fill("```json\n{"),
    ],
    "numbers": [
        fill("1"),
        fill("1,"),
        fill("1.1."),
        "\\frac{1" + " " * SIZE + "x",
        fill("\\frac{1}{"),
        fill("m^2 "),
        fill("1e"),
    ],
    "letters": [
        fill("A "),
        fill("A, "),
        fill("(A)"),
        "answer" + " " * SIZE + "x",
        fill("not "),
        fill("B or maybe "),
    ],
    "words": [fill("yes or no "), fill("是或否"), fill("Response 1 "), fill("both are equally "), " " * SIZE],
    "spans": [fill("from 3 to 5 seconds "), "3" + " " * SIZE + "x", fill("1-")],
}
PARSERS: dict[str, Callable[[str], Any]] = {
    "boxed": last_boxed,
    "tags": lambda text: (answer_tag_contents(text), strip_think(text), has_reasoning(text)),
    "json": lambda text: find_json(scored_tail(text)),
    "numbers": lambda text: parse_number(scored_tail(text)),
    "letters": lambda text: extract_choice(text, COLOURS),
    "words": lambda text: (read_polarity(scored_tail(text)), read_label(scored_tail(text))),
    "spans": lambda text: parse_span_text(scored_tail(text)),
}


@pytest.mark.parametrize("kind", list(BANK))
def test_parsers_are_linear_on_adversarial_text(kind: str) -> None:
    for text in BANK[kind]:
        for variant in (text, f"<answer>{text}</answer>"):
            elapsed = cpu_seconds(PARSERS[kind], variant)
            assert elapsed < LIMIT_S, (kind, variant[:40], elapsed)
            elapsed = cpu_seconds(lambda t: (extract_answer(t), final_statement(scored_tail(t))), variant)
            assert elapsed < LIMIT_S, ("extract_answer", variant[:40], elapsed)


def test_the_reported_quadratic_boxed_case() -> None:
    text = "\\boxed{" * 16000  # 112 KB: 69 s before
    assert cpu_seconds(last_boxed, text) < LIMIT_S
    assert last_boxed(text) is None
    assert last_boxed("\\boxed{" * 16000 + "42}") == "42"  # the innermost box is the last one to open


# (problem_type, ground truth, options) of every rule-based task; code and math run elsewhere, with
# their own time limits (sandbox, math helper process).
TASKS = [
    ("boolean", "Yes", None),
    ("multiple choice", "B", COLOURS),
    ("numerical", "25", None),
    ("regression", "25", None),
    ("counting", "4", None),
    ("ocr", "hello world", None),
    ("open-ended", "a cat on a mat", None),
    ("temporal grounding", '{"time": [1, 2]}', None),
    ("spatial grounding", '{"boxes": [0, 0, 5, 5]}', None),
    ("stvg", '{"time": [1, 2], "boxes": {"1": [0, 0, 4, 4]}}', None),
    ("tracking", '{"boxes": {"1": [0, 0, 4, 4]}}', None),
    ("segmentation", '{"size": [4, 4], "counts": [0, 16]}', None),
    ("preference", "Response 1", None),
]
RESPONSES = [
    fill("\\boxed{"),
    fill("<answer>"),
    fill("</think>"),
    fill("A, "),
    fill("[1,"),
    fill("1 "),
    fill('<answer>{"time": [1, \\boxed{2 or B, not A. yes'),
    "<think>" + fill("x") + "</think><answer>" + fill("{", 200_000) + "</answer>",
]


@pytest.mark.parametrize(("problem_type", "truth", "options"), TASKS, ids=[t[0] for t in TASKS])
def test_every_rule_based_task_scores_a_1mb_response_fast(problem_type: str, truth: str, options) -> None:
    config = RewardConfig(strict=True)
    for response in RESPONSES:
        elapsed = cpu_seconds(compute_score, response, truth, problem_type, options, config=config)
        assert elapsed < LIMIT_S, (problem_type, response[:40], elapsed)


def test_the_answer_at_the_end_of_a_long_response_is_still_read() -> None:
    reasoning = "Option A looks plausible. (C) is wrong. " * 50_000  # 2 MB without reasoning tags
    assert len(reasoning) > MAX_SCORED_CHARS
    result = compute_score(reasoning + "<answer>B</answer>", "B", "multiple choice", COLOURS)
    assert result["accuracy"] == 1.0
    result = compute_score("<think>" + reasoning + "</think><answer>No</answer>", "No", "boolean")
    assert (result["accuracy"], result["format"]) == (1.0, 1.0)
    # a truncated reasoning block stays reasoning however long: no answer is read from it
    assert compute_score("<think>" + reasoning + " the answer is B", "B", "mcq", COLOURS)["accuracy"] == 0.0


def test_code_answer_extraction_is_linear_on_unclosed_tags() -> None:
    """The code task finds its <answer> blocks in one pass (a lazy regex was quadratic here)."""
    import time

    from easyvideor1.rewards.tasks.code_execution import extract_code

    class _Answer:
        ambiguous = False

    class _Sample:
        answer = _Answer()
        body = "<answer>" * 200_000 + "x = 1"

    t = time.process_time()
    assert extract_code(_Sample()) is None
    assert time.process_time() - t < 2.0

    _Sample.body = "<answer>\n```python\n    x = 1\n    y = x\n```\n</answer>"
    assert extract_code(_Sample()) == "x = 1\ny = x"
