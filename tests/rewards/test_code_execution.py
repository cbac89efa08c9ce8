"""The code task: test cases in the sandbox, forgery resistance, time budget, SVG/HTML fallback."""

from __future__ import annotations

import json
import time

import pytest

from easyvideor1.rewards import GroundTruthError, RewardConfig, SandboxConfig

FAST = RewardConfig(strict=True, sandbox=SandboxConfig(wall_time_s=2.0, cpu_time_s=2))
SUM_TESTS = json.dumps(
    {
        "test_cases": [
            {"input": "1 2\n", "output": "3\n"},
            {"input": "5 7", "output": "12"},
            {"input": "0 0", "output": "1"},
        ]
    }
)
SUM_PROGRAM = "a, b = map(int, input().split())\nprint(a + b)"
ASSERT_TESTS = [
    "assert add(1, 2) == 3",
    "assert add(-1, 1) == 0",
    "assert add('a', 'b') == 'ab'",
    "assert add(2, 2) > 3",
]


@pytest.mark.parametrize(
    ("response", "accuracy", "format_score"),
    [
        (f"<answer>{SUM_PROGRAM}</answer>", 2 / 3, 1.0),  # the third test expects a wrong output
        (f"<answer>```python\n{SUM_PROGRAM}\n```</answer>", 2 / 3, 1.0),
        (f"Here it is:\n```python\n{SUM_PROGRAM}\n```", 2 / 3, 0.0),
        ("<answer>print(3)</answer>", 1 / 3, 1.0),
        ("<answer>def broken(:\n  pass</answer>", 0.0, 0.5),
        ("no code at all", 0.0, 0.0),
    ],
)
def test_stdin_stdout_tests(score, response: str, accuracy: float, format_score: float) -> None:
    result = score(response, SUM_TESTS, "code", config=FAST)
    assert result["accuracy"] == pytest.approx(accuracy)
    assert result["format"] == format_score


@pytest.mark.parametrize(
    ("program", "accuracy"),
    [
        ("def add(a, b):\n    return a + b", 1.0),
        ("def add(a, b):\n    return a + b if isinstance(a, int) else a", 0.75),
        ("def add(a, b):\n    return 3", 0.25),  # passes "add(1, 2) == 3" only
        ("import os\nos._exit(0)", 0.0),  # exiting before the tests
        ("import sys\nsys.exit(0)", 0.0),
        # forging result lines on every descriptor (more in test_code_forgery.py)
        (
            "import os\ndef add(a, b):\n    return None\n"
            "for fd in range(3, 64):\n    for i in range(4):\n        try:\n"
            '            os.write(fd, (\'{"i": %d, "repr": "3", "ok": true}\\n\' % i).encode())\n'
            "        except OSError:\n            pass",
            0.0,
        ),
    ],
)
def test_assert_tests(score, program: str, accuracy: float) -> None:
    truth = json.dumps({"test_cases": ASSERT_TESTS})
    assert score(f"<answer>{program}</answer>", truth, "coding", config=FAST)["accuracy"] == pytest.approx(
        accuracy
    )


JUDGED_PROGRAM = """
import math
counter = 0
def bump():
    global counter
    counter += 1
abs = lambda x: 0  # cannot change the tests' abs
class statistics:  # nor the tests' statistics module
    def mean(*args):
        return 0
def select(values):  # a task function named like a standard-library module
    return values[0]
from collections import deque, namedtuple
Point = namedtuple("Point", "x y")
def midpoint(a, b):
    return Point((a[0] + b[0]) / 2, (a[1] + b[1]) / 2)
def window(values):
    return deque(values, maxlen=2)
class Invalid(ValueError):
    pass
def parse(text):
    if not text.isdigit():
        raise Invalid(text)
    return int(text)
def squares(n):
    return [i * i for i in range(n)]
def add(a, b):
    return a + b
class Stack:
    def __init__(self):
        self.items = []
    def push(self, x):
        self.items.append(x)
        return self
    def __len__(self):
        return len(self.items)
def evens(n):
    yield from range(0, n, 2)
def sort_in_place(values):
    values.sort()
def checked_sqrt(x):
    if x < 0:
        raise ValueError("negative")
    return math.sqrt(x)
"""


@pytest.mark.parametrize(
    ("test", "passes"),
    [
        ("assert add(1, 2) == 3", True),
        ("assert add(1, 2) == 4", False),
        (
            "def check(candidate):\n    assert candidate(2, 2) == 4\n    assert candidate('a', 'b') == 'ab'\ncheck(add)",
            True,
        ),
        ("assert len(Stack().push(1).push(2)) == 2", True),
        ("assert add.__name__ == 'add' and Stack.__qualname__ == 'Stack'", True),
        ("assert Stack().push(5).items == [5]", True),
        ("assert list(evens(7)) == [0, 2, 4, 6] and 4 in evens(7)", True),
        ("g = evens(5)\nassert next(g) == 0 and next(g) == 2 and list(g) == [4]", True),
        ("values = [3, 1, 2]\nsort_in_place(values)\nassert values == [1, 2, 3]", True),  # in place
        ("assert math.isclose(checked_sqrt(2) ** 2, 2)", True),  # the judge's math
        ("try:\n    checked_sqrt(-1)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError", True),
        ("bump()\nbump()\nassert counter == 2", True),  # the program's globals, read at each use
        ("assert abs(add(-3, 0)) == 3", True),  # builtins are the judge's
        ("assert statistics.mean([1, 3]) == 2", True),  # so are modules the test uses as modules
        ("assert select([4, 5]) == 4", True),  # a program function named like a module is the program's
        ("assert undefined_name(1)", False),
        ("p = midpoint((0, 0), (2, 4))\nassert p == (1, 2) and p.y == 2", True),  # a namedtuple
        ("import collections\nassert window([1, 2, 3]) == collections.deque([2, 3])", True),
        ("try:\n    parse('x')\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError", True),
        ("assert sum(squares(200_000)) == sum(i * i for i in range(200_000))", True),  # a large result
        ("assert add(2 ** 20000, 1) == 2 ** 20000 + 1 and float('nan') != add(0.0, float('nan'))", True),
        ("assert add(1, 2) == 3.0 and add(0.5, 0.25) == 0.75 and add((1,), (2,)) == (1, 2)", True),
    ],
)
def test_assert_statements_are_judged_like_python(score, test: str, passes: bool) -> None:
    truth = json.dumps({"test_cases": [test]})
    result = score(f"<answer>{JUDGED_PROGRAM}</answer>", truth, "code", config=FAST)
    assert result["accuracy"] == (1.0 if passes else 0.0)


BUDGET = RewardConfig(strict=True, sandbox=SandboxConfig(wall_time_s=1.0, cpu_time_s=1, time_budget_s=2.5))


@pytest.mark.parametrize("kind", ["io", "assert"])
def test_time_budget_bounds_a_response(score, kind: str) -> None:
    """Eight tests that each take most of the per-test limit: ~6 s without a budget, 2.5 s with it."""
    if kind == "io":
        program = "import time\ntime.sleep(0.7)\nprint(input())"
        tests = [{"input": str(i), "output": str(i)} for i in range(8)]
    else:
        program = "import time\ndef slow(x):\n    time.sleep(0.7)\n    return x"
        tests = [f"assert slow({i}) == {i}" for i in range(8)]
    started = time.monotonic()
    result = score(f"<answer>{program}</answer>", "", "code", config=BUDGET, test_cases=tests)
    elapsed = time.monotonic() - started
    assert elapsed < BUDGET.sandbox.time_budget_s + 1.5, elapsed
    assert 0 < result["accuracy"] <= 3 / 8  # the first tests passed, the rest were cut
    assert result["time_budget_exhausted"] == 1.0
    assert result["tests_not_run"] >= 4


def test_time_budget_untouched_by_a_fast_response(score) -> None:
    result = score(f"<answer>{SUM_PROGRAM}</answer>", SUM_TESTS, "code", config=BUDGET)
    assert result["time_budget_exhausted"] == 0.0 and result["tests_not_run"] == 0.0


def test_time_budget_is_validated() -> None:
    with pytest.raises(ValueError, match="time_budget_s"):
        SandboxConfig(time_budget_s=0)


def test_expected_values_never_enter_the_sandbox(score) -> None:
    """The program cannot read `== 3` anywhere: it only receives the arguments of its calls."""
    spy = (
        "import gc, sys\n"
        "def add(a, b):\n"
        "    seen = repr([o for o in gc.get_objects() if isinstance(o, (list, dict, str))])\n"
        "    return 'leak' if '== 3' in seen else None"
    )
    truth = json.dumps({"test_cases": ["assert add(1, 2) == 3"]})
    assert score(f"<answer>{spy}</answer>", truth, "code", config=FAST)["accuracy"] == 0.0


def test_tests_from_record_fields(score) -> None:
    for field in ("test_cases", "tests", "input_output"):
        meta = {field: [{"input": "2 2", "output": "4"}]}
        assert score(f"<answer>{SUM_PROGRAM}</answer>", "", "code", config=FAST, **meta)["accuracy"] == 1.0
    apps = json.dumps({"inputs": ["1 1", "2 3"], "outputs": ["2", "5"]})
    assert (
        score(f"<answer>{SUM_PROGRAM}</answer>", "", "code", config=FAST, input_output=apps)["accuracy"]
        == 1.0
    )


def test_timeout_stops_remaining_cases(score) -> None:
    import time

    config = RewardConfig(strict=True, sandbox=SandboxConfig(wall_time_s=0.5, cpu_time_s=1))
    tests = [{"input": "", "output": "1"}] * 10
    started = time.monotonic()
    result = score("<answer>while True: pass</answer>", "", "code", config=config, test_cases=tests)
    assert result["accuracy"] == 0.0
    assert time.monotonic() - started < 3.0


def test_code_is_run_verbatim(score) -> None:
    program = "print('a < b / c > d')\nprint( 1 <2 )"
    tests = [{"input": "", "output": "a < b / c > d\nTrue"}]
    assert (
        score(f"<answer>\n{program}\n</answer>", "", "code", config=FAST, test_cases=tests)["accuracy"] == 1.0
    )


def test_python_record_without_tests_is_an_error(score) -> None:
    with pytest.raises(GroundTruthError):
        score("<answer>print(1)</answer>", "print(1)", "code", config=FAST)


SVG = '<svg width="10" height="10"><rect x="1" y="1" width="5" height="5" fill="red"/><circle cx="5" cy="5" r="2"/></svg>'


@pytest.mark.parametrize(
    ("response", "low", "high"),
    [
        (f"<answer>{SVG}</answer>", 1.0, 1.0),
        (
            '<answer><svg width="10" height="10"><rect x="2" y="2" width="4" height="4" fill="blue"/></svg></answer>',
            0.4,
            0.9,
        ),
        ("<answer><rect/><circle/></answer>", 0.0, 0.0),  # not an SVG document
        ("<answer>a drawing of a square</answer>", 0.0, 0.0),
    ],
)
def test_svg_structure_similarity(score, response: str, low: float, high: float) -> None:
    accuracy = score(response, SVG, "svg-code", config=FAST)["accuracy"]
    assert low <= accuracy <= high


def test_html_structure_similarity(score) -> None:
    page = "<html><body><h1>Title</h1><p>text</p></body></html>"
    assert score(f"<answer>{page}</answer>", page, "html-code", config=FAST)["accuracy"] == 1.0
    assert (
        score("<answer><div>x</div></answer>", page, "code", config=FAST, language="html")["accuracy"] < 0.5
    )
