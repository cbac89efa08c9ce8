"""Code: Python executed against the record's test cases in the sandbox; SVG/HTML by structure similarity.

Test cases come from the record (`test_cases`, `tests` or `input_output`, as a list or JSON text)
or from a JSON ground truth. Two kinds:

* `{"input": "...", "output": "..."}` (also `stdin`/`stdout`, or APPS-style `{"inputs": [...],
  "outputs": [...]}`): the program runs once per case with that stdin; it passes when it exits 0 and
  its stdout equals the output (trailing whitespace of lines and trailing blank lines aside).
* `"assert <expr> == <literal>"`: the program runs once; the sandbox reports `repr(<expr>)` and
  the comparison with the literal happens outside, so the expected values never enter the sandbox
  and cannot be printed back. Other assert statements run inside and report success; a program
  that inspects its harness could forge those, so prefer the `==` form.

Score = passed / run cases (the first `SandboxConfig.max_tests`); after a case hits the time limit
the remaining stdin cases are not run and count as failed, which bounds the time of one record.
Records without tests whose type or `language` is SVG or HTML (or whose ground truth is markup)
are scored by 0.7 x tag-sequence similarity + 0.3 x text similarity to the reference, a heuristic.
"""

from __future__ import annotations

import ast
import json
import re
import textwrap
import warnings
from dataclasses import dataclass
from typing import Any

from rapidfuzz import fuzz
from rapidfuzz.distance import Indel

from easyvideor1.rewards.registry import normalize_task_name, register_task
from easyvideor1.rewards.sample import GroundTruthError, Sample, TaskScore
from easyvideor1.rewards.sandbox import run_python

_TAG_RE = re.compile(r"<answer>(.*?)</answer>", re.IGNORECASE | re.DOTALL)
_FENCE_RE = re.compile(r"```[\w+-]*[ \t]*\n(.*?)```", re.DOTALL)
_MARKUP_TAG_RE = re.compile(r"<\s*([a-zA-Z][\w:-]*)")
_TEST_KEYS = ("test_cases", "tests", "input_output")
MAX_SOURCE_CHARS = 200_000


@dataclass(frozen=True)
class CodeTest:
    """One test: `kind` is "io" (stdin -> stdout), "value" (expression == literal) or "statement"."""

    kind: str
    payload: str
    expected: Any = None


def extract_code(sample: Sample) -> str | None:
    """The program of a response: the last fenced block of the answer tag, else the tag's content
    (dedented, otherwise verbatim); without a tag, the last fenced block of the response."""
    if sample.answer.ambiguous:
        return None
    tags = [content for content in _TAG_RE.findall(sample.body) if content.strip()]
    text = tags[-1] if tags else sample.body
    fences = _FENCE_RE.findall(text)
    if fences:
        return textwrap.dedent(fences[-1]).strip("\n") or None
    return textwrap.dedent(text.strip("\n")) if tags else None


def _assert_case(statement: str) -> CodeTest:
    try:
        tree = ast.parse(statement.strip())
    except SyntaxError as error:
        raise GroundTruthError(f"test case is not Python: {statement[:100]!r}") from error
    node = tree.body[0] if len(tree.body) == 1 else None
    if isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare):
        compare = node.test
        if len(compare.ops) == 1 and isinstance(compare.ops[0], ast.Eq):
            try:
                expected = ast.literal_eval(compare.comparators[0])
            except (ValueError, SyntaxError, TypeError):
                return CodeTest("statement", statement)
            return CodeTest("value", ast.unparse(compare.left), expected)
    return CodeTest("statement", statement)


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


def _value_matches(reported: str, expected: Any) -> bool:
    try:
        return ast.literal_eval(reported) == expected
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return reported == repr(expected)


def run_tests(code: str, cases: list[CodeTest], sample: Sample) -> int:
    """How many `cases` the program passes."""
    config = sample.config.sandbox
    passed = 0
    in_process = [case for case in cases if case.kind != "io"]
    if in_process:
        result = run_python(
            code, tests=tuple((case.kind, case.payload) for case in in_process), config=config
        )
        for index, case in enumerate(in_process):
            lines = [line for line in result.test_lines if line.get("i") == index]
            if len(lines) != 1:  # missing, or forged duplicates
                continue
            if case.kind == "value" and isinstance(lines[0].get("repr"), str):
                passed += _value_matches(lines[0]["repr"], case.expected)
            elif case.kind == "statement":
                passed += lines[0].get("ok") is True
    for case in (case for case in cases if case.kind == "io"):
        result = run_python(code, stdin=case.payload, config=config)
        if result.timed_out:
            break
        passed += result.ok and _same_output(result.stdout, case.expected)
    return passed


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
    passed = run_tests(code, cases, sample) if compiles else 0
    details = {"tests_passed": float(passed), "tests_total": float(len(cases))}
    return TaskScore(passed / len(cases), compiles, code[:200], details)
