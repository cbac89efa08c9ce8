"""Code: Python executed against the record's test cases in the sandbox; SVG/HTML by structure similarity.

Test cases come from the record (`test_cases`, `tests` or `input_output`, as a list or JSON text)
or from a JSON ground truth. Two kinds:

* `{"input": "...", "output": "..."}` (also `stdin`/`stdout`, or APPS-style `{"inputs": [...],
  "outputs": [...]}`): the program runs once per case with that stdin; it passes when it exits 0 and
  its stdout equals the output (trailing whitespace of lines and trailing blank lines aside). The
  comparison happens here, in the trusted parent; the expected output never enters the sandbox.
* Python statements, typically `"assert <expr> == <value>"` or any other assert, or HumanEval's
  `"def check(candidate): ...\ncheck(fn)"`: the program runs once, in one sandbox, and the statements
  run in another, the judge, against proxies of the program's globals; only the judge reports
  verdicts, and the program only ever hands it plain data (see `rewards/_sandbox_rpc.py` for why
  this cannot be forged: no object of the program takes part in a comparison, and nothing the
  program can reach carries a pass). The statements see the program's globals (later tests see what
  earlier ones defined), except builtins and standard-library modules used as modules: the judge's.

Score = passed / run cases (the first `SandboxConfig.max_tests`). Time is bounded twice: after a
case hits `wall_time_s` the remaining cases of its kind are not run, and all executions of one
response share `SandboxConfig.time_budget_s`; cases left when it is spent count as failed, and the
details say so (`time_budget_exhausted`, `tests_not_run`).
Records without tests whose type or `language` is SVG or HTML (or whose ground truth is markup)
are scored by 0.7 x tag-sequence similarity + 0.3 x text similarity to the reference, a heuristic.
"""

from __future__ import annotations

import ast
import json
import re
import textwrap
import time
import warnings
from dataclasses import dataclass
from typing import Any

from rapidfuzz import fuzz
from rapidfuzz.distance import Indel

from easyvideor1.rewards.assertion_judge import judge_assertions
from easyvideor1.rewards.parsing import answer_tag_contents
from easyvideor1.rewards.registry import normalize_task_name, register_task
from easyvideor1.rewards.sample import GroundTruthError, Sample, TaskScore
from easyvideor1.rewards.sandbox import run_python

_FENCE_RE = re.compile(r"```[\w+-]*[ \t]*\n(.*?)```", re.DOTALL)
_MARKUP_TAG_RE = re.compile(r"<\s*([a-zA-Z][\w:-]*)")
_TEST_KEYS = ("test_cases", "tests", "input_output")
MAX_SOURCE_CHARS = 200_000


@dataclass(frozen=True)
class CodeTest:
    """One test: `kind` is "io" (`payload` is stdin, `expected` stdout) or "assert" (a statement)."""

    kind: str
    payload: str
    expected: Any = None


@dataclass(frozen=True)
class CaseRun:
    """What running one response's tests gave.

    Attributes:
        passed: tests passed.
        not_run: tests never started (after a timeout, or once the time budget was spent).
        budget_exhausted: `SandboxConfig.time_budget_s` ran out before every test had run.
    """

    passed: int
    not_run: int = 0
    budget_exhausted: bool = False


def extract_code(sample: Sample) -> str | None:
    """The program of a response: the last fenced block of the answer tag, else the tag's content
    (dedented, otherwise verbatim); without a tag, the last fenced block of the response."""
    if sample.answer.ambiguous:
        return None
    # one linear pass (a lazy regex rescans the rest of the text from every unclosed <answer>)
    tags = [content for content in answer_tag_contents(sample.body, strip=False) if content.strip()]
    text = tags[-1] if tags else sample.body
    fences = _FENCE_RE.findall(text)
    if fences:
        return textwrap.dedent(fences[-1]).strip("\n") or None
    return textwrap.dedent(text.strip("\n")) if tags else None


def _assert_case(statement: str) -> CodeTest:
    try:
        ast.parse(statement.strip())
    except SyntaxError as error:
        raise GroundTruthError(f"test case is not Python: {statement[:100]!r}") from error
    return CodeTest("assert", statement.strip())


def read_test_cases(sample: Sample) -> list[CodeTest]:
    """The record's test cases (empty when it has none)."""
    raw: Any = next((sample.meta[key] for key in _TEST_KEYS if sample.meta.get(key) is not None), None)
    if raw is None:
        try:
            truth = json.loads(sample.truth)
        except ValueError:
            return []
        raw = (
            next((truth[key] for key in _TEST_KEYS if key in truth), None)
            if isinstance(truth, dict)
            else truth
        )
    if isinstance(raw, str):
        raw = json.loads(raw)
    if isinstance(raw, dict) and "inputs" in raw and "outputs" in raw:
        if raw.get("fn_name"):
            raise GroundTruthError("call-based (fn_name) tests are not supported; use assert tests")
        raw = [{"input": i, "output": o} for i, o in zip(raw["inputs"], raw["outputs"], strict=True)]
    if not isinstance(raw, list):
        return []
    cases = []
    for case in raw:
        if isinstance(case, str):
            cases.append(_assert_case(case))
        elif isinstance(case, dict):
            stdin = case.get("input", case.get("stdin", ""))
            expected = case.get("output", case.get("stdout", case.get("expected_output")))
            if expected is None:
                raise GroundTruthError(f"test case without an expected output: {case!r:.100}")
            cases.append(CodeTest("io", _as_text(stdin), _as_text(expected)))
        else:
            raise GroundTruthError(f"unsupported test case: {case!r:.100}")
    return cases


def _as_text(value: Any) -> str:
    if isinstance(value, list):
        return "\n".join(str(v) for v in value)
    return str(value)


def _same_output(actual: str, expected: str) -> bool:
    def lines(text: str) -> list[str]:
        rows = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
        while rows and not rows[-1]:
            rows.pop()
        return rows

    return lines(actual) == lines(expected)


def run_tests(code: str, cases: list[CodeTest], sample: Sample) -> CaseRun:
    """Run `cases` against the program within the response's time budget."""
    config = sample.config.sandbox
    deadline = time.monotonic() + config.time_budget_s
    passed = not_run = 0
    exhausted = False
    statements = tuple(case.payload for case in cases if case.kind == "assert")
    if statements:
        verdicts = judge_assertions(code, statements, config, time_limit=deadline - time.monotonic())
        passed += sum(verdicts.passed)
        # "no verdict": the pair was stopped before the judge reached the test
        not_run += sum(error == "no verdict" or str(error).startswith("not run") for error in verdicts.errors)
        exhausted = verdicts.timed_out and time.monotonic() >= deadline
    io_cases = [case for case in cases if case.kind == "io"]
    for index, case in enumerate(io_cases):
        left = deadline - time.monotonic()
        if left <= 0:
            exhausted = True
            not_run += len(io_cases) - index
            break
        result = run_python(code, stdin=case.payload, config=config, time_limit=left)
        if result.timed_out:  # a program that timed out once would time out again: stop here
            exhausted = exhausted or time.monotonic() >= deadline
            not_run += len(io_cases) - index - 1
            break
        passed += result.ok and _same_output(result.stdout, case.expected)
    return CaseRun(passed, not_run, exhausted)


def markup_similarity(predicted: str, reference: str, kind: str) -> float:
    """0.7 x similarity of the tag sequences + 0.3 x similarity of the whitespace-normalised text."""
    if kind == "svg" and not (
        re.search(r"<svg\b", predicted, re.I) and re.search(r"</svg\s*>", predicted, re.I)
    ):
        return 0.0
    predicted_tags = [tag.lower() for tag in _MARKUP_TAG_RE.findall(predicted)]
    if not predicted_tags:
        return 0.0
    reference_tags = [tag.lower() for tag in _MARKUP_TAG_RE.findall(reference)]
    structure = Indel.normalized_similarity(predicted_tags, reference_tags)
    text = fuzz.ratio(" ".join(predicted.split()), " ".join(reference.split())) / 100
    return 0.7 * structure + 0.3 * text


def _markup_kind(sample: Sample) -> str | None:
    declared = f"{normalize_task_name(sample.problem_type)} {str(sample.meta.get('language') or '').lower()}"
    for kind in ("svg", "html"):
        if kind in declared:
            return kind
    reference = sample.truth.lstrip().lower()
    if reference.startswith("<svg") or (reference.startswith("<?xml") and "<svg" in reference):
        return "svg"
    if reference.startswith(("<!doctype html", "<html")):
        return "html"
    return None


@register_task(
    "code",
    aliases=("coding", "svg-code", "html-code", "python", "programming", "code generation"),
    expensive=True,
    instruction="Give the complete program in one fenced code block inside <answer></answer>.",
)
def score_code(sample: Sample) -> TaskScore:
    """Fraction of test cases passed (Python), or markup similarity (SVG/HTML without tests)."""
    code = extract_code(sample)
    markup = _markup_kind(sample)
    cases = [] if markup else read_test_cases(sample)
    if markup:
        if code is None:
            return TaskScore(0.0, False, None)
        score = markup_similarity(code, sample.truth, markup)
        return TaskScore(score, score > 0, code[:200], {"structure_similarity": score})
    if not cases:
        raise GroundTruthError("code record has no test cases (test_cases, tests or input_output)")
    cases = cases[: sample.config.sandbox.max_tests]
    if code is None or len(code) > MAX_SOURCE_CHARS:
        return TaskScore(0.0, False, None, {"tests_passed": 0.0, "tests_total": float(len(cases))})
    try:
        with warnings.catch_warnings():  # the model's code: its SyntaxWarnings are not ours to print
            warnings.simplefilter("ignore", SyntaxWarning)
            compile(code, "solution.py", "exec")
        compiles = True
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        compiles = False
    run = run_tests(code, cases, sample) if compiles else CaseRun(0)
    details = {
        "tests_passed": float(run.passed),
        "tests_total": float(len(cases)),
        "tests_not_run": float(run.not_run),
        "time_budget_exhausted": float(run.budget_exhausted),
    }
    return TaskScore(run.passed / len(cases), compiles, code[:200], details)
