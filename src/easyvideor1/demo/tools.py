"""``easyvideor1 demo --tools``: a task only the ``seek`` tool answers (the colour of the square
during a window the first view misses), with and without tools."""

from __future__ import annotations

import os
import time

from ..config import RunConfig, load_config
from ..data.preprocess import format_report, preprocess
from ..resolve import resolve_config
from .common import (
    CHANCE,
    demo_config_path,
    demo_run_paths,
    new_plot,
    prepare_demo_assets,
    print_rows,
    save_plot,
    write_report,
)

REFUSED = "tools are disabled in this run; answer from the first view"


def run_tool_demo(out: str, overrides: list[str] | None = None, n_train: int = 256, n_val: int = 64) -> dict:
    """``demo --tools``: the window task (``configs/demo_tools.yaml``), warm-up on offline tool-use
    episodes, hybrid GRPO over episodes, then the held-out set three ways: with the tools, with
    every call refused (the same prompt, the policy must answer from its first view) and without
    the tools in the prompt. ``report.json`` and ``reward_curve.png`` in ``out``."""
    from ..tools.session import ToolSession, tool_tracks
    from ..trainer.evaluate import evaluate, summarize
    from ..trainer.loop import Trainer

    t0 = time.time()
    os.makedirs(out, exist_ok=True)
    base = demo_run_paths(out, "train", n_train, n_val)
    cfg: RunConfig = resolve_config(
        prepare_demo_assets(
            load_config(RunConfig, demo_config_path("demo_tools.yaml"), base + list(overrides or []))
        )
    )
    files = [cfg.data.train_files[0], cfg.data.val_files[0]]
    tracks = tool_tracks(cfg.tools, cfg.data.model_family)
    print(
        format_report(
            preprocess(files, cfg.data, cfg.data.cache_dir, workers=2, progress=False, tracks=tracks)
        )
    )

    trainer = Trainer(cfg)
    trainer.train()
    parts, data = trainer.parts, trainer.data
    val_set, idx, sampling = data.val_set, list(range(len(data.val_set))), trainer.settings.val_sampling

    def held_out(tools) -> list[dict]:
        return evaluate(parts.engine, parts.processor, val_set, idx, sampling, cfg.reward, tools=tools)

    with_tools = held_out(parts.tools)
    refused = ToolSession(cfg.tools, parts.tools.model_family, loader=parts.tools.loader, refuse=REFUSED)
    tools_refused = held_out(refused)
    schemas, val_set.tools = val_set.tools, None  # the prompt without the tool list, no episodes
    try:
        without = held_out(None)
    finally:
        val_set.tools = schemas
    windows = [val_set.records[r["index"]].extra.get("window") for r in with_tools]
    hist = trainer.history
    result = {
        "variant": "tools",
        "family": cfg.data.model_family,
        "accuracy_with_tools": _mean(r["accuracy"] for r in with_tools),
        "tool_call_rate": _mean(bool(r.get("tool_calls")) for r in with_tools),
        "window_hit_rate": window_hit_rate(with_tools, windows),
        "accuracy_without_tools": _mean(r["accuracy"] for r in without),
        "answer_rate_without_tools": _mean(r["format"] > 0 for r in without),
        "accuracy_tools_refused": _mean(r["accuracy"] for r in tools_refused),
        "answer_rate_tools_refused": _mean(r["format"] > 0 for r in tools_refused),
        "calls_per_sample": _mean(r.get("tool_calls", 0) for r in with_tools),
        "invalid_calls": sum(c["status"] == "invalid" for r in with_tools for c in r.get("calls", [])),
        "accuracy_before": next(h for h in hist if h["step"] == 0).get("val/accuracy"),
        "accuracy_after_warmup": next(
            (h["val/accuracy_after_warmup"] for h in hist if "val/accuracy_after_warmup" in h), None
        ),
        "tool_call_rate_after_warmup": next(
            (h["val/tool_call_rate_after_warmup"] for h in hist if "val/tool_call_rate_after_warmup" in h),
            None,
        ),
        "chance": CHANCE,
        "held_out": len(with_tools),
        "steps": trainer.step,
        "sft_warmup_steps": cfg.trainer.sft_warmup_steps,
        "wall_seconds": round(time.time() - t0, 1),
        "curve": [
            {k: h[k] for k in ("step", "reward/accuracy", "val/accuracy", "val/tool_call_rate") if k in h}
            for h in hist
        ],
        "summary_with_tools": summarize(with_tools),
    }
    write_report(os.path.join(out, "report.json"), result)
    plot_tool_curves(out, result)
    print_tool_table(result)
    return result


def _mean(values) -> float:
    values = [float(v) for v in values]
    return sum(values) / len(values) if values else 0.0


def window_hit_rate(rows: list[dict], windows: list) -> float:
    """Of the calls made, those whose frames fall in the record's answer window: a ``seek``
    whose [start_s, end_s] meets it, a ``frame_at`` / ``zoom`` whose time_s is inside it."""
    hits = total = 0
    for row, window in zip(rows, windows, strict=True):
        for call in row.get("calls", []):
            total += 1
            args = call.get("arguments") or {}
            if call["status"] != "ok" or not window:
                continue
            lo, hi = (
                (args.get("start_s"), args.get("end_s")) if "start_s" in args else (args.get("time_s"),) * 2
            )
            hits += lo is not None and float(lo) <= window[1] and float(hi) >= window[0]
    return hits / total if total else 0.0


def plot_tool_curves(out: str, r: dict) -> str | None:
    """``reward_curve.png`` of the tool demo: held-out accuracy with tools and the call rate per
    step, the final accuracy with the tools refused and without them, chance."""
    plot = new_plot()
    if plot is None:
        return None
    fig, ax = plot
    curve = r["curve"]
    train = [(c["step"], c["reward/accuracy"]) for c in curve if "reward/accuracy" in c]
    val = [(c["step"], c["val/accuracy"]) for c in curve if "val/accuracy" in c]
    rate = [(c["step"], c["val/tool_call_rate"]) for c in curve if "val/tool_call_rate" in c]
    if r.get("accuracy_after_warmup") is not None:  # RL starts from the warmed-up policy, not step 0's
        ax.plot([0], [r["accuracy_before"]], "o", mfc="none", color="tab:blue", label="before the warm-up")
        val = [(0, r["accuracy_after_warmup"])] + [v for v in val if v[0] > 0]
        rate = [(0, r["tool_call_rate_after_warmup"])] + [v for v in rate if v[0] > 0]
    if train:
        ax.plot(*zip(*train, strict=True), color="tab:blue", alpha=0.35, lw=1, label="rollout accuracy")
    if val:
        ax.plot(*zip(*val, strict=True), "o-", color="tab:blue", label="held-out accuracy, with seek")
    if rate:
        ax.plot(*zip(*rate, strict=True), "s--", color="tab:green", label="held-out tool-call rate")
    last = r["steps"]
    ax.plot([last], [r["accuracy_tools_refused"]], "X", ms=9, color="tab:red", label="calls refused")
    ax.plot(
        [last], [r["accuracy_without_tools"]], "v", ms=9, color="tab:purple", label="no tools in the prompt"
    )
    title = "easyvideor1 demo --tools: colour during a window the first view misses"
    path = os.path.join(out, "reward_curve.png")
    return save_plot(fig, ax, path, title, ("RL step (0: after the warm-up)", "accuracy / rate"))


def print_tool_table(r: dict) -> None:
    rows = [
        ("accuracy with tools", f"{r['accuracy_with_tools']:.3f}"),
        ("tool-call rate", f"{r['tool_call_rate']:.3f}"),
        ("calls in the window", f"{r['window_hit_rate']:.3f}"),
        ("calls refused", f"{r['accuracy_tools_refused']:.3f}"),
        ("no tools in prompt", f"{r['accuracy_without_tools']:.3f}"),
        ("chance", f"{r['chance']:.2f}"),
        ("RL steps", r["steps"]),
        ("wall time", f"{r['wall_seconds']:.0f} s"),
    ]
    print_rows(rows)
