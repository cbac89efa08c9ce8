"""The filter's report: ``report.json``, ``report.md``, ``report.html`` and ``pass_rate_histogram.png``.

Counts per task: ``total`` records, ``kept``, ``always_solved`` (every response passed),
``never_solved`` (none did), ``failed_to_load`` (invalid records, media or generation failures),
and the mean pass rate of the scored ones. The histogram has one bar per possible pass rate
(k/n), the kept band shaded. Nothing time-dependent is written, so a resumed run's report equals
an uninterrupted run's.
"""

from __future__ import annotations

import base64
import html
import json
import os
from collections import Counter, defaultdict
from typing import Any

from ..outdir import save_figure, write_text_atomic
from .outputs import RecordResult

HISTOGRAM = "pass_rate_histogram.png"


def _counts(results: list[RecordResult]) -> dict[str, Any]:
    scored = [r for r in results if r.status == "scored"]
    rates = [r.pass_rate for r in scored]
    return {
        "total": len(results),
        "scored": len(scored),
        "kept": sum(r.kept for r in results),
        "always_solved": sum(r.passes == r.n for r in scored),
        "never_solved": sum(r.passes == 0 for r in scored),
        "failed_to_load": len(results) - len(scored),
        "mean_pass_rate": sum(rates) / len(rates) if rates else None,
    }


def build_report(results: list[RecordResult], meta: dict[str, Any], outputs: dict[str, dict]) -> dict:
    """``report.json``'s content: settings, totals, per-task counts, histogram, failures, outputs."""
    by_task: dict[str, list[RecordResult]] = defaultdict(list)
    for r in results:
        by_task[r.item.task].append(r)
    n = meta["settings"]["n"]
    hist = Counter(r.passes for r in results if r.status == "scored" and r.n == n)
    failures = [
        {"source": r.item.source, "problem_id": r.item.problem_id, "status": r.status, "error": r.error}
        for r in results
        if r.status != "scored"
    ]
    return {
        **meta,
        "totals": _counts(results),
        "by_task": {task: _counts(rs) for task, rs in sorted(by_task.items())},
        "histogram": {"pass_rate": [k / n for k in range(n + 1)], "records": [hist[k] for k in range(n + 1)]},
        "failures": failures,
        "outputs": outputs,
    }


def plot_histogram(report: dict, path: str) -> str | None:
    """One bar per pass rate k/n, kept ones green, the band shaded between its bounds (dashed)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    rates, counts = report["histogram"]["pass_rate"], report["histogram"]["records"]
    lo, hi = report["band"]["lo"], report["band"]["hi"]
    width = 0.8 / max(1, len(rates) - 1)
    colours = ["tab:green" if lo - 1e-12 <= x <= hi + 1e-12 else "tab:gray" for x in rates]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.axvspan(lo, hi, color="tab:green", alpha=0.12, label=f"kept band [{lo:g}, {hi:g}] (inclusive)")
    bars = ax.bar(rates, counts, width=width, color=colours)
    ax.bar_label(bars, fontsize=8)
    for x in (lo, hi):
        ax.axvline(x, color="tab:green", linestyle="--", linewidth=1)
    ax.set_xlabel(f"pass rate (passes / {report['settings']['n']})")
    ax.set_ylabel("records")
    ax.set_xlim(-0.08, 1.08)
    ax.set_ylim(0, max([*counts, 1]) * 1.18)  # room for the bar labels and the legend
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.legend(loc="upper right", fontsize=8, framealpha=0.9)
    t = report["totals"]
    ax.set_title(
        f"{t['kept']} of {t['total']} records kept ({t['failed_to_load']} failed to load)", fontsize=10
    )
    fig.tight_layout()
    try:  # no version stamp: reruns write the same file
        save_figure(fig, path, dpi=110, metadata={"Software": None})
    finally:
        plt.close(fig)
    return path


def _table(report: dict) -> list[list[str]]:
    def fmt(c: dict) -> list[str]:
        mean = "-" if c["mean_pass_rate"] is None else f"{c['mean_pass_rate']:.3f}"
        keys = ("total", "kept", "always_solved", "never_solved", "failed_to_load")
        return [str(c[k]) for k in keys] + [mean]

    rows = [[task, *fmt(c)] for task, c in report["by_task"].items()]
    return rows + [["**all**", *fmt(report["totals"])]]


_HEAD = ["task", "total", "kept", "always solved", "never solved", "failed to load", "mean pass rate"]


def render_markdown(report: dict) -> str:
    s, b = report["settings"], report["band"]
    lines = [
        "# Pass-rate filter",
        "",
        f"model `{report['model']}` (fingerprint `{report['model_fingerprint']}`), n={s['n']}, "
        f"temperature {s['temperature']}, top_p {s['top_p']}, top_k {s['top_k']}, "
        f"max_new_tokens {s['max_new_tokens']}, seed {s['seed']}"
        + (f", engine {s['engine']}" if "engine" in s else ""),
        "",
        f"kept: pass rate in [{b['lo']:g}, {b['hi']:g}] (inclusive); a pass: accuracy reward >= the "
        "task's threshold (`thresholds` in report.json)",
        "",
        "| " + " | ".join(_HEAD) + " |",
        "|" + "---|" * len(_HEAD),
    ]
    lines += ["| " + " | ".join(row) + " |" for row in _table(report)]
    lines += ["", f"![pass-rate histogram]({HISTOGRAM})", "", "## Outputs", ""]
    for src, o in report["outputs"].items():
        lines.append(f"- `{src}` ({o['format']}): {o['kept']} of {o['total']} kept -> `{o['path']}`")
    if report["failures"]:
        lines += ["", f"## Failed to load ({len(report['failures'])})", ""]
        lines += [f"- `{f['source']}` ({f['status']}): {f['error']}" for f in report["failures"][:200]]
        if len(report["failures"]) > 200:
            lines.append(f"- ... {len(report['failures']) - 200} more in report.json")
    return "\n".join(lines) + "\n"


def render_html(report: dict, png: str | None) -> str:
    e = html.escape
    head = "".join(f"<th>{e(h)}</th>" for h in _HEAD)
    body = "".join(
        "<tr>" + "".join(f"<td>{e(c.replace('**', ''))}</td>" for c in row) + "</tr>"
        for row in _table(report)
    )
    img = ""
    if png and os.path.exists(png):
        data = base64.b64encode(open(png, "rb").read()).decode()
        img = f'<p><img alt="pass-rate histogram" src="data:image/png;base64,{data}"></p>'
    fails = "".join(
        f"<li><code>{e(f['source'])}</code> ({e(f['status'])}): {e(str(f['error']))}</li>"
        for f in report["failures"][:500]
    )
    md_intro = render_markdown(report).split("\n\n")[1:3]
    return (
        "<!doctype html><meta charset='utf-8'><title>Pass-rate filter</title>"
        "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:right}"
        "td:first-child{text-align:left}</style>"
        "<h1>Pass-rate filter</h1>"
        + "".join(f"<p>{e(p)}</p>" for p in md_intro)
        + f"<table><tr>{head}</tr>{body}</table>{img}"
        + (f"<h2>Failed to load</h2><ul>{fails}</ul>" if fails else "")
    )


def write_report(results: list[RecordResult], meta: dict, outputs: dict, out_dir: str) -> dict:
    """All four report files; returns the report dict."""
    report = build_report(results, meta, outputs)
    png = plot_histogram(report, os.path.join(out_dir, HISTOGRAM))
    for name, text in (
        ("report.json", json.dumps(report, indent=1, ensure_ascii=False) + "\n"),
        ("report.md", render_markdown(report)),
        ("report.html", render_html(report, png)),
    ):
        write_text_atomic(os.path.join(out_dir, name), text)
    return report
