"""``easyvideor1 demo``: the whole loop on a laptop CPU, from nothing, in minutes.

Synthesise a video task set with offline responses -> build the frame cache -> build a tiny
model of the chosen family (``--family``, default Qwen3-VL) -> validate -> (supervised warm-up on the offline responses) -> hybrid GRPO -> validate
-> ``report.json`` and ``reward_curve.png`` in the output directory, and a short table.

``demo --tools`` (:func:`run_tool_demo`): a task only the ``seek`` tool answers. ``demo --distill``
(:func:`run_distill_demo`): a teacher trained on the task, then a fresh student three ways (GRPO,
on-policy distillation from the teacher, RLSD) -> ``report_distill.json`` and
``demo_distill_curve.png``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from importlib import resources

import yaml

from .config import ConfigError, RunConfig, load_config
from .data.preprocess import format_report, preprocess
from .data.synthetic import write_demo_set, write_tool_demo_set
from .jsonlines import json_lines
from .models.families import get_family, resolve_family
from .models.tiny import make_tiny_model
from .outdir import save_figure, write_text_atomic
from .resolve import resolve_config

CHANCE = 0.25
# per-step history kept in report.json (blank/shuffled: trainer.video_probe_every)
_CURVE_KEYS = (
    "step",
    "reward/accuracy",
    "val/accuracy",
    "val/accuracy_blank_video",
    "val/accuracy_shuffled_video",
)
_WARM_BLANK = "val/accuracy_blank_video_after_warmup"


def demo_config_path(name: str = "demo.yaml") -> str:
    return str(resources.files("easyvideor1") / "configs" / name)


def prepare_demo_assets(cfg: RunConfig, family: str | None = None) -> RunConfig:
    """Create the demo's videos, records and tiny model where ``cfg`` expects them (if missing);
    returns ``cfg`` reading them (``data.train_files`` / ``val_files`` when those are empty).

    The tiny model is of ``family`` (else ``data.model_family``, else Qwen3-VL); a model already
    at ``model.path`` must be of that family."""
    d = cfg.demo
    train, val = os.path.join(d.data_dir, "train.jsonl"), os.path.join(d.data_dir, "val.jsonl")
    if not os.path.exists(val):
        if d.task == "window":
            write_tool_demo_set(d.data_dir, d.n_train, d.n_val, first_view_frames=cfg.data.video_nframes or 4)
        else:
            write_demo_set(d.data_dir, d.n_train, d.n_val, mixed=d.mixed)
    files = {"train_files": cfg.data.train_files or [train], "val_files": cfg.data.val_files or [val]}
    if not os.path.exists(os.path.join(cfg.model.path, "config.json")):
        wanted = resolve_family(None, family or cfg.data.model_family or "qwen3_vl", declared_as="--family")
        make_tiny_model(cfg.model.path, wanted.model_type, layers=d.model_layers)
    elif family is not None:
        try:
            resolve_family(cfg.model.path, family, declared_as="--family")
        except ValueError as e:
            raise ConfigError(f"{e}; or give another model.path or --out") from None
    return dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, **files))


def demo_run_paths(out: str, run: str, n_train: int, n_val: int, model: str = "model") -> list[str]:
    """The overrides that put a demo run's data, cache and tiny model under ``out`` (shared by
    every run there) and its output in ``out/run``."""
    return [
        f"demo.data_dir={os.path.join(out, 'data')}",
        f"demo.n_train={n_train}",
        f"demo.n_val={n_val}",
        f"data.cache_dir={os.path.join(out, 'cache')}",
        f"model.path={os.path.join(out, model)}",
        f"trainer.output_dir={os.path.join(out, run)}",
    ]


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


def cache_and_train(cfg: RunConfig):
    """Build the frame cache of ``cfg``'s training and validation files (its report printed), then
    train: the finished :class:`~easyvideor1.trainer.loop.Trainer`."""
    from .trainer.loop import Trainer

    files = [cfg.data.train_files[0], cfg.data.val_files[0]]
    print(format_report(preprocess(files, cfg.data, cfg.data.cache_dir, workers=2, progress=False)))
    trainer = Trainer(cfg)
    trainer.train()
    return trainer


# ``demo --distill``: the accuracy a method must reach, and the teacher's GRPO steps after its warm-up
DISTILL_TARGET = 0.9
TEACHER_RL_STEPS = 25


def distill_methods(teacher_dir: str) -> dict[str, list[str]]:
    """The three ways the fresh student learns in ``demo --distill``: the overrides of each run over
    ``configs/demo_distill.yaml`` (which sets their weights, and why)."""
    return {
        "grpo": [],
        "opd": ["algorithm.distill.objective=opd", f"algorithm.distill.teacher={teacher_dir}"],
        "rlsd": ["algorithm.distill.objective=rlsd", "algorithm.distill.teacher=self"],
    }


def run_distill_demo(
    out: str,
    overrides: list[str] | None = None,
    teacher_overrides: list[str] | None = None,
    n_train: int = 256,
    n_val: int = 64,
) -> dict:
    """``demo --distill``: train a teacher on the demo task (``configs/demo.yaml``: the warm-up, then
    :data:`TEACHER_RL_STEPS` GRPO steps, or reuse ``out/teacher``), then a fresh student (the
    untrained tiny model, cold start) three ways with the same seed, steps and validations: GRPO
    alone, on-policy distillation from the teacher, RLSD with the policy shown the answer.
    ``overrides`` apply to the three student runs, ``teacher_overrides`` to the teacher's.
    ``report_distill.json`` and ``demo_distill_curve.png`` in ``out``."""
    t0 = time.time()
    os.makedirs(out, exist_ok=True)
    teacher = distill_teacher(out, teacher_overrides or [], n_train, n_val)
    with open(demo_config_path("demo_distill.yaml")) as f:
        student_settings = yaml.safe_load(f)
    methods = {}
    for method, method_overrides in distill_methods(teacher["path"]).items():
        base = demo_run_paths(out, f"student_{method}", n_train, n_val)
        cfg = load_config(
            RunConfig, demo_config_path(), base + method_overrides + list(overrides or []), student_settings
        )
        started = time.time()
        trainer = cache_and_train(resolve_config(prepare_demo_assets(cfg)))
        methods[method] = method_result(trainer, started)
        trainer.close()
    grpo, opd = methods["grpo"], methods["opd"]
    result = {
        "variant": "distill",
        "family": "qwen3_vl",
        "target": DISTILL_TARGET,
        "chance": CHANCE,
        "teacher": teacher,
        "methods": methods,
        **distill_ratio(grpo, opd),
        "wall_seconds": round(time.time() - t0, 1),
    }
    write_report(os.path.join(out, "report_distill.json"), result)
    plot_distill_curves(out, result)
    print_distill_table(result)
    return result


def distill_teacher(out: str, overrides: list[str], n_train: int, n_val: int) -> dict:
    """The teacher of ``demo --distill``: ``out/teacher``, a model directory trained by the demo's
    own run (``configs/demo.yaml``, :data:`TEACHER_RL_STEPS` GRPO steps after the warm-up) and
    exported, or the one already there (not trained again). What is known of it: its path, its
    held-out accuracy, whether it was reused."""
    path, summary = os.path.join(out, "teacher"), os.path.join(out, "teacher.json")
    if os.path.exists(os.path.join(path, "config.json")):
        known = {"path": path}
        if os.path.exists(summary):
            with open(summary) as f:
                known = json.load(f)
        print(f"reusing the teacher in {path} (remove it to train it again)")
        return {**known, "path": path, "reused": True}
    from .trainer.checkpoint import export_model

    started = time.time()
    base = demo_run_paths(out, "teacher_run", n_train, n_val) + [f"trainer.max_steps={TEACHER_RL_STEPS}"]
    cfg = resolve_config(prepare_demo_assets(load_config(RunConfig, demo_config_path(), base + overrides)))
    trainer = cache_and_train(cfg)
    export_model(trainer.model, trainer.parts.processor, path, trainer.parts.dist)
    hist = trainer.history
    known = {
        "path": path,
        "accuracy_after_warmup": next(
            (h["val/accuracy_after_warmup"] for h in hist if "val/accuracy_after_warmup" in h), None
        ),
        "accuracy": hist[-1].get("val/accuracy"),
        "sft_warmup_steps": cfg.trainer.sft_warmup_steps,
        "steps": trainer.step,
        "wall_seconds": round(time.time() - started, 1),
    }
    trainer.close()
    write_report(summary, known)
    return {**known, "reused": False}


def method_result(trainer, started: float) -> dict:
    """One student run of ``demo --distill``: its held-out accuracy at each validation, the first
    validated step at :data:`DISTILL_TARGET` (None: never, in ``steps``), its rollout accuracy per
    step, and the teacher-student KL (``distill/kl_k1``) at its first and last step."""
    hist = trainer.history
    # a resumed run validates its last step again: one point per step, the latest
    at = {h["step"]: h["val/accuracy"] for h in hist if "val/accuracy" in h}
    curve = [{"step": step, "val/accuracy": acc} for step, acc in at.items()]
    metrics = trainer.parts.logger.jsonl_path  # absent when the run logged no JSONL
    rows = [row for _, row in json_lines(metrics)] if os.path.exists(metrics) else []
    kl = [row["distill/kl_k1"] for row in rows if isinstance(row, dict) and "distill/kl_k1" in row]
    return {
        "curve": curve,
        f"steps_to_{DISTILL_TARGET}": next(
            (c["step"] for c in curve if c["val/accuracy"] >= DISTILL_TARGET), None
        ),
        "steps": trainer.step,
        "accuracy_after": curve[-1]["val/accuracy"],
        "rollout_accuracy": [[h["step"], h["reward/accuracy"]] for h in hist if "reward/accuracy" in h],
        "kl_k1_first_last": [kl[0], kl[-1]] if kl else None,
        "wall_seconds": round(time.time() - started, 1),
    }


def distill_ratio(grpo: dict, opd: dict) -> dict:
    """``distill_vs_grpo``: GRPO's steps to the target over OPD's (None when OPD never reaches
    it); when GRPO never does, its steps run stand for its steps, a lower bound of the ratio."""
    key = f"steps_to_{DISTILL_TARGET}"
    opd_steps, grpo_steps = opd[key], grpo[key]
    lower_bound = grpo_steps is None
    ratio = None
    if opd_steps:  # a student at the target before any step (0) has no ratio
        ratio = round((grpo["steps"] if lower_bound else grpo_steps) / opd_steps, 2)
    return {"distill_vs_grpo": ratio, "distill_vs_grpo_is_lower_bound": lower_bound and ratio is not None}


ROLLOUT_MEAN_STEPS = 10
DISTILL_LABELS = {
    "grpo": ("GRPO alone", "tab:red"),
    "opd": ("on-policy distillation (OPD)", "tab:blue"),
    "rlsd": ("RLSD (self-teacher shown the answer)", "tab:green"),
}


def plot_distill_curves(out: str, r: dict) -> str | None:
    """``demo_distill_curve.png``: each method's held-out accuracy per validation (faint: its
    rollout accuracy, a running mean of :data:`ROLLOUT_MEAN_STEPS` steps), the teacher's, the
    target and chance."""
    plot = _new_plot()
    if plot is None:
        return None
    fig, ax = plot
    for method, m in r["methods"].items():
        label, colour = DISTILL_LABELS[method]
        if m["rollout_accuracy"]:
            steps, acc = zip(*m["rollout_accuracy"], strict=True)
            window = [acc[max(0, i + 1 - ROLLOUT_MEAN_STEPS) : i + 1] for i in range(len(acc))]
            ax.plot(steps, [sum(w) / len(w) for w in window], color=colour, alpha=0.3, lw=1)
        steps = [c["step"] for c in m["curve"]]
        ax.plot(steps, [c["val/accuracy"] for c in m["curve"]], "o-", ms=3, color=colour, label=label)
    if r["teacher"].get("accuracy") is not None:
        ax.axhline(r["teacher"]["accuracy"], color="black", lw=1, alpha=0.5, label="the teacher")
    ax.axhline(r["target"], color="grey", ls=":", lw=1, label=f"target {r['target']}")
    title = "easyvideor1 demo --distill: a fresh tiny Qwen3-VL, three ways"
    path = os.path.join(out, "demo_distill_curve.png")
    labels = (f"RL step (faint: rollout accuracy, mean of {ROLLOUT_MEAN_STEPS} steps)", "held-out accuracy")
    return _save_plot(fig, ax, path, title, labels, legend="upper left")


def print_distill_table(r: dict) -> None:
    """One row per method: held-out accuracy at (at most 11 of) its validations, the steps to the
    target; every validation is in the report."""
    key = f"steps_to_{r['target']}"
    methods = r["methods"]
    validated = sorted({c["step"] for m in methods.values() for c in m["curve"]})
    steps = validated[:: max(1, len(validated) // 10)]
    steps += [validated[-1]] if steps[-1] != validated[-1] else []
    header = ["method", *(f"@{s}" for s in steps), key]
    rows = [header]
    for method, m in methods.items():
        at = {c["step"]: f"{c['val/accuracy']:.2f}" for c in m["curve"]}
        reached = m[key]
        rows.append(
            [
                method,
                *(at.get(s, "-") for s in steps),
                f"never in {m['steps']}" if reached is None else reached,
            ]
        )
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    print("\n".join("  ".join(f"{str(v):<{w}}" for v, w in zip(row, widths, strict=True)) for row in rows))
    ratio = r["distill_vs_grpo"]
    bound = " (a lower bound: GRPO never reached the target)" if r["distill_vs_grpo_is_lower_bound"] else ""
    teacher = r["teacher"].get("accuracy")
    _print_rows(
        [
            ("teacher accuracy", "-" if teacher is None else f"{teacher:.3f}"),
            ("distill_vs_grpo", "-" if ratio is None else f"{ratio}{bound}"),
            ("wall time", f"{r['wall_seconds']:.0f} s"),
        ]
    )


REFUSED = "tools are disabled in this run; answer from the first view"


def run_tool_demo(out: str, overrides: list[str] | None = None, n_train: int = 256, n_val: int = 64) -> dict:
    """``demo --tools``: the window task (``configs/demo_tools.yaml``), warm-up on offline tool-use
    episodes, hybrid GRPO over episodes, then the held-out set three ways: with the tools, with
    every call refused (the same prompt, the policy must answer from its first view) and without
    the tools in the prompt. ``report.json`` and ``reward_curve.png`` in ``out``."""
    from .tools.session import ToolSession, tool_tracks
    from .trainer.evaluate import evaluate, summarize
    from .trainer.loop import Trainer

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
    plot = _new_plot()
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
    return _save_plot(fig, ax, path, title, ("RL step (0: after the warm-up)", "accuracy / rate"))


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
    _print_rows(rows)


def plot_curves(out: str, suffix: str = "") -> str | None:
    """``reward_curve.png``: training accuracy per step and validation accuracy, for every variant run."""
    plot = _new_plot()
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
    return _save_plot(fig, ax, os.path.join(out, f"reward_curve{suffix}.png"), title, ("RL step", "accuracy"))


def _new_plot():
    """``(figure, axes)`` of a demo plot (matplotlib's Agg backend), or None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt.subplots(figsize=(7, 4))


def _save_plot(fig, ax, path: str, title: str, labels: tuple[str, str], legend: str = "center right") -> str:
    """Finish a demo plot as every demo does (chance, the (x, y) axis ``labels``, accuracy from 0
    to 1, the legend at ``legend``), write it to ``path`` and close it."""
    import matplotlib.pyplot as plt

    ax.axhline(CHANCE, color="grey", ls="--", lw=1, label="chance")
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=7, loc=legend)
    ax.set_title(title)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path


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
    _print_rows(rows)


def _print_rows(rows: list[tuple[str, object]]) -> None:
    """The demo's result table: names left-aligned, values after them."""
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in rows))


def write_report(path: str, result: dict) -> None:
    """A demo's JSON report, written whole (a planted link at its name is refused, naming it)."""
    write_text_atomic(path, json.dumps(result, indent=1))
