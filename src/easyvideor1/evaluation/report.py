"""Run-level outputs: ``results.json`` over all benchmarks and a Markdown table."""

from __future__ import annotations

import json
import os
from typing import Any


def write_summary(results: dict[str, dict[str, Any]], out_dir: str) -> str:
    from .results import write_json_atomic

    write_json_atomic(os.path.join(out_dir, "results.json"), results)
    lines = [
        "| benchmark | metric | score | samples | failures | extraction failures | truncated | not scored | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, r in results.items():
        lines.append(
            f"| {name} | {r.get('metric', 'accuracy')} | {_points(r['score'])} | {r['evaluated']}/{r['samples']} | "
            f"{r['failures']} | {r['extraction_failures']} | {r.get('truncated', 0)} | {r.get('not_scored', 0)} | "
            f"{r.get('seconds', '-')} |"
        )
    path = os.path.join(out_dir, "results.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


def _points(score: float | None) -> str:
    return "-" if score is None else f"{100 * score:.2f}"


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
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def compare_runs(run_a: str, run_b: str) -> str:
    """A table of per-benchmark scores of two runs and their difference (B - A), in points."""
    a = json.load(open(os.path.join(run_a, "results.json"), encoding="utf-8"))
    b = json.load(open(os.path.join(run_b, "results.json"), encoding="utf-8"))
    lines = [
        f"| benchmark | {os.path.basename(run_a.rstrip('/'))} | {os.path.basename(run_b.rstrip('/'))} | delta |",
        "|---|---|---|---|",
    ]
    for name in sorted(set(a) | set(b)):
        sa, sb = (
            100 * r[name]["score"] if name in r and r[name]["score"] is not None else None for r in (a, b)
        )
        delta = f"{sb - sa:+.2f}" if sa is not None and sb is not None else "-"
        fmt = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
        lines.append(f"| {name} | {fmt(sa)} | {fmt(sb)} | {delta} |")
    return "\n".join(lines)


def write_sample_pages(bench_dir: str, inputs, dataset, digest: str, n: int = 6) -> str:
    """``samples.html``: for a handful of samples, sampled frames, the prompt, the response and the score."""
    import base64
    import html
    import io

    from PIL import Image

    from .predictions import read_predictions

    rows = read_predictions(os.path.join(bench_dir, "predictions.jsonl"), digest).rows
    parts = [
        "<html><head><meta charset='utf-8'><title>samples</title></head><body style='font-family:sans-serif'>"
    ]
    shown = 0
    for i, (rec, sid) in enumerate(zip(inputs.records, inputs.ids, strict=True)):
        row = rows.get(sid)
        if row is None or shown >= n:
            continue
        shown += 1
        thumbs = ""
        sample = dataset[i]
        try:
            for video in (
                dataset.loader.load(sample.videos[0], sample.video_params).frames[::4][:4]
                if sample.videos
                else []
            ):
                buf = io.BytesIO()
                Image.fromarray(video.numpy()).save(buf, format="PNG")
                thumbs += f"<img height=96 src='data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}'> "
        except Exception as e:  # a page without frames beats no page
            thumbs = f"<i>frames unavailable: {html.escape(str(e))}</i>"
        parts.append(
            f"<h3>{html.escape(sid)} - accuracy {float(row.get('accuracy') or 0):.2f}</h3><div>{thumbs}</div>"
            f"<pre>{html.escape(sample.record.problem)}</pre><p><b>response</b></p>"
            f"<pre>{html.escape(str(row.get('prediction') or row.get('error')))}</pre>"
            f"<p><b>answer</b> {html.escape(rec.answer)}</p><hr>"
        )
    parts.append("</body></html>")
    path = os.path.join(bench_dir, "samples.html")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(parts))
    return path
