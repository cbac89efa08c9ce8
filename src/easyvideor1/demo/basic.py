"""``easyvideor1 demo``: the whole loop on a laptop CPU, from nothing, in minutes.

Synthesise a video task set with offline responses -> build the frame cache -> build a tiny
model of the chosen family (``--family``, default Qwen3-VL) -> validate -> (supervised warm-up on
the offline responses) -> hybrid GRPO -> validate -> ``report.json`` and ``reward_curve.png`` in
the output directory, and a short table."""

from __future__ import annotations

import json
import os
import time

from ..config import RunConfig, load_config
from ..models.families import get_family
from ..resolve import resolve_config
from .common import (
    CHANCE,
    cache_and_train,
    demo_config_path,
    demo_run_paths,
    new_plot,
    prepare_demo_assets,
    print_rows,
    save_plot,
    write_report,
)

# per-step history kept in report.json (blank/shuffled: trainer.video_probe_every)
_CURVE_KEYS = (
    "step",
    "reward/accuracy",
    "val/accuracy",
    "val/accuracy_blank_video",
    "val/accuracy_shuffled_video",
)


_WARM_BLANK = "val/accuracy_blank_video_after_warmup"


def run_demo(
    out: str,
    overrides: list[str] | None = None,
    cold_start: bool = False,
    n_train: int = 256,
    n_val: int = 64,
    family: str = "qwen3vl",
) -> dict:
    t0 = time.time()
    os.makedirs(out, exist_ok=True)
    family = get_family(family).model_type
    # the default family keeps the historical layout; others get their own model and run dirs
    suffix = "" if family == "qwen3_vl" else f"-{family}"
    run_name = ("cold_start" if cold_start else "hybrid") + suffix
    base = demo_run_paths(out, run_name, n_train, n_val, model="model" + suffix)
    base += list(get_family(family).fixture.demo_overrides)  # where the Qwen-VL demo settings do not apply
    if cold_start:  # the cold start the hybrid interface exists for: no warm-up, no offline responses
        base += ["rollout.hybrid=off", "trainer.sft_warmup_steps=0"]
    cfg: RunConfig = resolve_config(
        prepare_demo_assets(load_config(RunConfig, demo_config_path(), base + list(overrides or [])), family)
    )
    trainer = cache_and_train(cfg)
    hist = trainer.history
    before = next(h for h in hist if h["step"] == 0)
    after = hist[-1]
    result = {
        "variant": run_name,
        "family": family,
        "accuracy_before": before.get("val/accuracy"),
        "accuracy_after_warmup": next(
            (h["val/accuracy_after_warmup"] for h in hist if "val/accuracy_after_warmup" in h), None
        ),
        "accuracy_after": after.get("val/accuracy"),
        "chance": CHANCE,
        "steps": trainer.step,
        "sft_warmup_steps": cfg.trainer.sft_warmup_steps,
        "hybrid": cfg.rollout.hybrid,
        "wall_seconds": round(time.time() - t0, 1),
        "curve": [{k: h[k] for k in _CURVE_KEYS if k in h} for h in hist],
    }
    if cfg.trainer.video_probe_every:  # the video-dependence probe (blank frames) beside the real accuracy
        result["accuracy_blank_video_after"] = after.get("val/accuracy_blank_video")
        result["accuracy_blank_video_after_warmup"] = next(
            (h[_WARM_BLANK] for h in hist if _WARM_BLANK in h), None
        )
    report_name = ("report" if not cold_start else "report_cold_start") + suffix + ".json"
    write_report(os.path.join(out, report_name), result)
    plot_curves(out, suffix)
    print_table(result)
    return result


def plot_curves(out: str, suffix: str = "") -> str | None:
    """``reward_curve.png``: training accuracy per step and validation accuracy, for every variant run."""
    plot = new_plot()
    if plot is None:
        return None
    fig, ax = plot
    for name, colour in (
        (f"report{suffix}.json", "tab:blue"),
        (f"report_cold_start{suffix}.json", "tab:red"),
    ):
        path = os.path.join(out, name)
        if not os.path.exists(path):
            continue
        r = json.load(open(path))
        train = [(c["step"], c["reward/accuracy"]) for c in r["curve"] if "reward/accuracy" in c]
        val = [(c["step"], c["val/accuracy"]) for c in r["curve"] if "val/accuracy" in c]
        label = "pure GRPO (cold start)"
        if r["variant"].startswith("hybrid"):
            label = "hybrid GRPO" + (" (+ warm-up)" if r.get("sft_warmup_steps", 1) else "")
        if train:
            ax.plot(
                *zip(*train, strict=True), color=colour, alpha=0.35, lw=1, label=f"{label}: rollout accuracy"
            )
        if val:
            ax.plot(*zip(*val, strict=True), "o-", color=colour, label=f"{label}: held-out accuracy")
        blank = [
            (c["step"], c["val/accuracy_blank_video"]) for c in r["curve"] if "val/accuracy_blank_video" in c
        ]
        if blank:  # trainer.video_probe_every: the same prompts with every frame blanked
            ax.plot(*zip(*blank, strict=True), "x--", color=colour, label=f"{label}: held-out, video blanked")
        if r.get("accuracy_blank_video_after_warmup") is not None:
            ax.plot([0], [r["accuracy_blank_video_after_warmup"]], "X", ms=9, color=colour, alpha=0.6)
        if r.get("accuracy_after_warmup") is not None:
            ax.plot(
                [0],
                [r["accuracy_after_warmup"]],
                "*",
                ms=12,
                color=colour,
                label="after the supervised warm-up",
            )
    title = f"easyvideor1 demo: tiny {suffix.lstrip('-') or 'qwen3_vl'}, colour of a moving square"
    return save_plot(fig, ax, os.path.join(out, f"reward_curve{suffix}.png"), title, ("RL step", "accuracy"))


def print_table(r: dict) -> None:
    warm = r.get("accuracy_after_warmup")
    rows = [
        ("variant", r["variant"]),
        ("accuracy before", f"{r['accuracy_before']:.3f}"),
        ("after warm-up", "-" if warm is None else f"{warm:.3f}"),
        ("accuracy after", f"{r['accuracy_after']:.3f}"),
    ]
    if r.get("accuracy_blank_video_after") is not None:
        rows.append(("blank video after", f"{r['accuracy_blank_video_after']:.3f}"))
    rows += [
        ("chance", f"{r['chance']:.2f}"),
        ("RL steps", r["steps"]),
        ("wall time", f"{r['wall_seconds']:.0f} s"),
    ]
    print_rows(rows)
