"""``easyvideor1 eval-compare RUN_A RUN_B``: what changed between two evaluation runs.

Samples are paired by benchmark and ``sample_id`` (the id is a digest of the record, so the same
question pairs up whatever order the files had). Printed and written to the comparison page: each
benchmark's headline (from each run's ``results.json``), the difference B - A with a 95% paired
bootstrap confidence interval, per-task deltas, and the samples whose verdict changed.

The interval resamples the paired samples (the same draw for both runs, which is what makes it
paired) and recomputes the mean per-sample score difference: for accuracy benchmarks that is exactly
the headline difference; for benchmarks whose headline is a macro average or another aggregation,
it is the interval of the per-sample mean (stated on the page as such).
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from typing import Any

import numpy as np

from .report_html import read_payload, write_page

BOOTSTRAP_DRAWS = 2000


def paired_bootstrap(a: list[float], b: list[float], draws: int = BOOTSTRAP_DRAWS, seed: int = 0):
    """95% percentile interval of mean(b - a) over ``draws`` resamples of the pairs (None if empty)."""
    if not a:
        return None
    diff = np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
    rng = np.random.default_rng(seed)
    means = diff[rng.integers(0, len(diff), size=(draws, len(diff)))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return [float(lo), float(hi)]


def _results(run: str) -> dict[str, Any]:
    path = os.path.join(run, "results.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{run}: no results.json (not an `easyvideor1 eval` output directory?)")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _rows(path: str) -> list[dict]:
    """A report's rows with their thumbnails back inline (the comparison page shares them anew)."""
    payload = read_payload(path)
    thumbs = payload.get("thumbs", [])
    return [{**r, "th": thumbs[r["th"]] if isinstance(r.get("th"), int) else None} for r in payload["rows"]]


def compare_runs(run_a: str, run_b: str, out: str | None = None, seed: int = 0) -> str:
    """The comparison as text (Markdown tables); writes the page of changed samples to ``out``
    (default ``RUN_B/compare.html``)."""
    res_a, res_b = _results(run_a), _results(run_b)
    rows_a = {(r["b"], r["id"]): r for r in _rows(os.path.join(run_a, "report.html"))}
    rows_b = _rows(os.path.join(run_b, "report.html"))
    name_a, name_b = (os.path.basename(os.path.abspath(p)) for p in (run_a, run_b))
    paired: dict[str, list[tuple[dict, dict]]] = defaultdict(list)
    for rb in rows_b:
        ra = rows_a.get((rb["b"], rb["id"]))
        if ra is not None:
            paired[rb["b"]].append((ra, rb))
    benchmarks, tasks, changed = {}, [], []
    for name in sorted(set(res_a) | set(res_b)):
        pairs = [(ra, rb) for ra, rb in paired.get(name, []) if ra["s"] is not None and rb["s"] is not None]
        sa, sb = (r.get(name, {}).get("score") for r in (res_a, res_b))
        flips = [(ra, rb) for ra, rb in paired.get(name, []) if ra["v"] != rb["v"]]
        benchmarks[name] = {
            "metric": (res_b.get(name) or res_a.get(name) or {}).get("metric", "accuracy"),
            "score_a": sa,
            "score_b": sb,
            "delta": None if sa is None or sb is None else sb - sa,
            "ci": paired_bootstrap([ra["s"] for ra, _ in pairs], [rb["s"] for _, rb in pairs], seed=seed),
            "paired": len(pairs),
            "changed": len(flips),
        }
        by_task: dict[str, list[tuple[dict, dict]]] = defaultdict(list)
        for ra, rb in pairs:
            by_task[rb["t"]].append((ra, rb))
        for task, group in sorted(by_task.items()):
            n = len(group)
            tasks.append(
                {
                    "benchmark": name,
                    "task": task,
                    "a": sum(ra["s"] for ra, _ in group) / n,
                    "b": sum(rb["s"] for _, rb in group) / n,
                    "n": n,
                }
            )
        for ra, rb in flips:
            changed.append(
                {**rb, "va": ra["v"], "sa": ra["s"], "ra": ra["r"], "ea": ra["e"], "th": rb["th"] or ra["th"]}
            )
    path = out or os.path.join(run_b, "compare.html")
    write_page(
        path,
        f"easyvideor1 eval-compare: {name_a} -> {name_b}",
        benchmarks,
        changed,
        mode="compare",
        tasks=tasks,
    )
    note = _probe_note(res_a, res_b)
    return _text(name_a, name_b, benchmarks, tasks, path) + (f"\n{note}" if note else "")


def _probe_note(res_a: dict, res_b: dict) -> str | None:
    """A line saying which run was a video-dependence probe (``eval --probe``), when they differ."""
    seen = [
        sorted({str(r.get("probe") or "real") for r in res.values() if isinstance(r, dict)})
        for res in (res_a, res_b)
    ]
    if seen[0] == seen[1]:
        return None
    return (
        f"video: A {'/'.join(seen[0])}, B {'/'.join(seen[1])} (eval --probe); with the real video as A "
        "and a probe as B, minus the delta is the video gap: how much the score rests on the video"
    )


def _pts(x: float | None, sign: bool = False) -> str:
    return "-" if x is None else (f"{100 * x:+.2f}" if sign else f"{100 * x:.2f}")


def _text(name_a: str, name_b: str, benchmarks: dict, tasks: list[dict], path: str) -> str:
    lines = [
        f"| benchmark | {name_a} | {name_b} | delta | 95% CI (paired bootstrap) | paired | changed |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, r in benchmarks.items():
        ci = "-" if r["ci"] is None else f"[{_pts(r['ci'][0], True)}, {_pts(r['ci'][1], True)}]"
        lines.append(
            f"| {name} | {_pts(r['score_a'])} | {_pts(r['score_b'])} | {_pts(r['delta'], True)} | {ci} | "
            f"{r['paired']} | {r['changed']} |"
        )
    if tasks:
        lines += ["", "| benchmark / task | A | B | delta | samples |", "|---|---|---|---|---|"]
        for t in tasks:
            lines.append(
                f"| {t['benchmark']} / {t['task']} | {_pts(t['a'])} | {_pts(t['b'])} | "
                f"{_pts(t['b'] - t['a'], True)} | {t['n']} |"
            )
    lines += ["", f"samples whose verdict changed: {path}"]
    return "\n".join(lines)
