"""Math through math-verify, with a hard timeout that works off the main thread."""

from __future__ import annotations

import threading
import time

import pytest

from easyvideor1.rewards import RewardConfig, compute_score
from easyvideor1.rewards.isolation import CallTimeout, IsolatedCaller


@pytest.mark.parametrize(
    ("response", "truth", "accuracy"),
    [
        ("<answer>0.5</answer>", "\\frac{1}{2}", 1.0),
        ("<answer>$\\frac{1}{2}$</answer>", "1/2", 1.0),
        ("<answer>\\boxed{(x+1)^2}</answer>", "x^2+2x+1", 1.0),
        ("The final answer is $\\boxed{2\\sqrt{2}}$", "\\sqrt{8}", 1.0),
        ("<answer>3</answer>", "3.0", 1.0),
        ("<answer>\\pi</answer>", "\\pi", 1.0),
        ("<answer>0.6</answer>", "\\frac{1}{2}", 0.0),
        ("<answer>x^2</answer>", "x^3", 0.0),
        ("<answer>1/2 or 1/3</answer>", "\\frac{1}{2}", 0.0),
        ("A long derivation where 1/2 appears first\nand more lines follow with no conclusion", "1/2", 0.0),
        ("", "1/2", 0.0),
    ],
)
def test_math_equivalence(score, response: str, truth: str, accuracy: float) -> None:
    assert score(response, truth, "mathematics")["accuracy"] == accuracy


def test_math_with_options_is_multiple_choice(score) -> None:
    options = ["A. 1/2", "B. 1/3"]
    assert score("<answer>B</answer>", "<answer>B</answer>", "math", options)["accuracy"] == 1.0
    assert score("<answer>1/3</answer>", "B", "math", options)["accuracy"] == 1.0


def test_math_works_off_the_main_thread() -> None:
    results = []
    thread = threading.Thread(
        target=lambda: results.append(compute_score("<answer>0.25</answer>", "1/4", "math"))
    )
    thread.start()
    thread.join(60)
    assert results and results[0]["accuracy"] == 1.0


def test_math_timeout_scores_zero_and_is_flagged() -> None:
    # sympy evaluates 10^(10^10) exactly: minutes of C code that only killing the helper stops
    result = compute_score(
        "<answer>5</answer>", "10^{10^{10}}", "math", config=RewardConfig(math_timeout_s=1.0)
    )
    assert (result["accuracy"], result["math_timeout"]) == (0.0, 1.0)
    assert "error" not in result
    again = compute_score("<answer>0.5</answer>", "\\frac{1}{2}", "math")  # the helper restarts
    assert (again["accuracy"], again["math_timeout"]) == (1.0, 0.0)


def test_isolated_caller_kills_overrunning_calls() -> None:
    caller = IsolatedCaller()
    try:
        started = time.monotonic()
        with pytest.raises(CallTimeout):
            caller.call(time.sleep, (30,), timeout=0.5)
        assert time.monotonic() - started < 10
        assert caller.call(divmod, (7, 2), timeout=30) == (3, 1)
        with pytest.raises(ZeroDivisionError):
            caller.call(divmod, (1, 0), timeout=30)
    finally:
        caller.close()
