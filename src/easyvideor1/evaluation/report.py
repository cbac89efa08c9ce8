"""Run-level outputs: ``results.json`` over all benchmarks, a Markdown table, ``scores.png`` and
``report.html`` (every sample; ``report_html.py``)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from ..outdir import save_figure, write_text_atomic


def write_summary(results: dict[str, dict[str, Any]], out_dir: str) -> str:
    from .results import write_json_atomic

    write_json_atomic(os.path.join(out_dir, "results.json"), results)
    lines = [
        "| benchmark | metric | score | 95% CI (clustered by video) | samples | failures | extraction failures "
        "| truncated | not scored | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r.get('metric', 'accuracy')} | {_points(r['score'])} | {interval_text(r)} | "
            f"{r['evaluated']}/{r['samples']} | "
            f"{r['failures']} | {r['extraction_failures']} | {r.get('truncated', 0)} | {r.get('not_scored', 0)} | "
            f"{r.get('seconds', '-')} |"
        )
    path = os.path.join(out_dir, "results.md")
    write_text_atomic(path, "\n".join(lines) + "\n")
    return path


def _points(score: float | None) -> str:
    return "-" if score is None else f"{100 * score:.2f}"


def interval_text(result: dict[str, Any], fmt: Callable[[float], str] = _points) -> str:
    """A benchmark's 95% interval, ``[lo, hi]`` (in points unless ``fmt`` says), or "-" where it
    has none (results written before intervals existed have none either)."""
    ci = result.get("ci95")
    return "-" if not ci else f"[{fmt(ci[0])}, {fmt(ci[1])}]"


def plot_scores(results: dict[str, dict[str, Any]], out_dir: str) -> str | None:
    """``scores.png``: one bar per benchmark."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    names = list(results)
    fig, ax = plt.subplots(figsize=(max(4, 0.8 * len(names) + 2), 3.5))
    bars = ax.bar(names, [100 * (results[n]["score"] or 0.0) for n in names], color="tab:blue")
    ax.bar_label(bars, fmt="%.1f", fontsize=8)
    ax.set_ylabel("score (%)")
    ax.set_ylim(0, 105)
    ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    path = os.path.join(out_dir, "scores.png")
    try:
        save_figure(fig, path, dpi=110)
    finally:
        plt.close(fig)
    return path


def write_run_report(out_dir: str, items: list, results: dict[str, dict[str, Any]], reward=None) -> str:
    """``OUT/report.html``: every sample of every benchmark of the run (``report_html.py``).

    ``items`` are the run's BenchmarkInputs; each benchmark's rows are those its ``results.json``
    counted (same settings digest, re-scored under ``reward`` when stale)."""
    from .predictions import read_predictions
    from .report_html import read_thumbs, sample_rows, write_page
    from .rows import rescore

    rows: list[dict] = []
    for item in items:
        bench_dir = os.path.join(out_dir, item.spec.name)
        digest = results[item.spec.name].get("settings")
        found = read_predictions(os.path.join(bench_dir, "predictions.jsonl"), digest).rows
        by_id = {rec_id: found[rec_id] for rec_id in item.ids if rec_id in found}
        for rec, sid in zip(item.records, item.ids, strict=True):
            if sid in by_id:
                by_id[sid] = rescore(item.spec, rec, by_id[sid], reward)
        rows += sample_rows(item, by_id, read_thumbs(os.path.join(bench_dir, "thumbs.jsonl")))
    keep = ("metric", "score", "samples", "evaluated", "failures", "extraction_failures", "not_scored")
    keep += ("ci95", "ci95_reason", "stderr_clustered", "n_clusters")
    benchmarks = {name: {k: r.get(k) for k in keep} for name, r in results.items()}
    title = f"easyvideor1 eval: {os.path.basename(os.path.abspath(out_dir))}"
    return write_page(os.path.join(out_dir, "report.html"), title, benchmarks, rows, mode="run")
