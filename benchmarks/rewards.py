"""Reward-library throughput: rule-based scores per second on one core, sandboxed executions per second.

Targets (issue 3): >= 20,000 rule-based scores/s on one core for a mixed multiple-choice / numerical /
grounding batch, and >= 10 sandboxed executions/s on 2 cores. Prints the measured figures and one
JSON line; ~30 s (exit 1 if a target is missed). ``--smoke``: tiny sizes, the same keys.

    python benchmarks/rewards.py [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's package

from easyvideor1.rewards import compute_scores, shutdown_pool  # noqa: E402
from easyvideor1.rewards.sandbox import isolation_capabilities, run_python  # noqa: E402

OPTIONS = ["A. red", "B. green", "C. blue", "D. yellow"]
RULE_TARGET = 20_000
SANDBOX_TARGET = 10


def rule_batch(size: int) -> list[dict]:
    """Realistic rollouts: reasoning, then a tagged answer; a quarter of each kind."""
    reasoning = "<think>The person picks up the green ball at 3.2 s and puts it down at 7.5 s.</think>"
    items = []
    for index in range(size // 4):
        items += [
            {"response": f"{reasoning}<answer>{'ABCD'[index % 4]}</answer>", "ground_truth": "<answer>B</answer>",
             "problem_type": "multiple choice", "options": OPTIONS},
            {"response": f"{reasoning}<answer>{12 + index % 3}.5</answer>", "ground_truth": "<answer>12.97</answer>",
             "problem_type": "numerical"},
            {"response": f'{reasoning}<answer>{{"time": [3.2, {7 + index % 5}.5]}}</answer>',
             "ground_truth": '<answer>{"time": [3.0, 8.0]}</answer>', "problem_type": "temporal grounding"},
            {"response": f'{reasoning}<answer>{{"time": [3.2, 7.5], "boxes": {{"4": [10, 20, 110, 220], "5": [12, 20, 112, 220]}}}}</answer>',
             "ground_truth": '<answer>{"time": [3.0, 8.0], "boxes": {"4": [12, 18, 100, 200], "5": [14, 18, 104, 200], "6": [16, 18, 106, 200]}}</answer>',
             "problem_type": "spatial-temporal grounding"},
        ]  # fmt: skip
    return items


def measure_rules(size: int = 40_000, repeats: int = 3) -> float:
    items = rule_batch(size)
    compute_scores(items[:1000], workers=0)  # warm caches and lazy imports
    best = 0.0
    for _ in range(repeats):
        started = time.perf_counter()
        compute_scores(items, workers=0)
        best = max(best, len(items) / (time.perf_counter() - started))
    return best


def measure_sandbox(executions: int = 120, workers: int = 2) -> float:
    program = (
        "import sys\nnumbers = [int(x) for x in sys.stdin.read().split()]\nprint(sum(n * n for n in numbers))"
    )
    run_python(program, stdin="1 2 3")  # probe the platform once
    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda i: run_python(program, stdin=f"{i} {i + 1}"), range(executions)))
    rate = executions / (time.perf_counter() - started)
    if not all(result.ok for result in results):
        raise RuntimeError("a benchmark execution failed")
    return rate


def measure_code_records(records: int = 60, workers: int = 2) -> float:
    truth = json.dumps({"test_cases": [{"input": f"{n}", "output": f"{n * n}"} for n in range(3)]})
    items = [
        {
            "response": "<answer>print(int(input()) ** 2)</answer>",
            "ground_truth": truth,
            "problem_type": "code",
        }
    ] * records
    compute_scores(items[:workers], workers=workers)  # start the pool
    started = time.perf_counter()
    results = compute_scores(items, workers=workers)
    rate = records / (time.perf_counter() - started)
    if any(result["accuracy"] != 1.0 for result in results):
        raise RuntimeError("a benchmark code record failed")
    return rate


RESULT_KEYS = ("rule_scores_per_s", "sandbox_executions_per_s", "code_records_per_s", "targets_met")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes (seconds): checks it runs; the targets are not enforced",
    )
    args = ap.parse_args()
    # full: 40,000 scores x 3, 120 executions, 60 code records; smoke: a few of each
    rule_size, repeats, executions, records = (400, 1, 6, 4) if args.smoke else (40_000, 3, 120, 60)
    print(
        f"cores available: {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else os.cpu_count()}"
    )
    rules = measure_rules(rule_size, repeats)
    print(
        f"rule-based scores (MC / numerical / temporal / spatio-temporal, 1 core): {rules:,.0f}/s (target {RULE_TARGET:,})"
    )
    print(f"sandbox isolation: {isolation_capabilities()}")
    sandbox = measure_sandbox(executions)
    print(f"sandboxed executions (2 concurrent): {sandbox:.1f}/s (target {SANDBOX_TARGET})")
    code = measure_code_records(records)
    print(
        f"code records through compute_scores (3 tests each, 2 workers): {code:.1f}/s = {3 * code:.1f} executions/s"
    )
    shutdown_pool()
    ok = rules >= RULE_TARGET and sandbox >= SANDBOX_TARGET
    print("targets met" if ok else "TARGETS MISSED")
    figures = (round(rules), round(sandbox, 1), round(code, 1), ok)
    print(json.dumps(dict(zip(RESULT_KEYS, figures, strict=True))))
    return 0 if ok or args.smoke else 1


if __name__ == "__main__":
    sys.exit(main())
