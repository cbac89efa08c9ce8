"""``easyvideor1 demo --distill``: a teacher trained on the task, then a fresh student three ways
(GRPO, on-policy distillation from the teacher, RLSD) -> ``report_distill.json`` and
``demo_distill_curve.png``."""

from __future__ import annotations

import json
import os
import time

import yaml

from ..config import RunConfig, load_config
from ..jsonlines import json_lines
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
    from ..trainer.checkpoint import export_model

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
    plot = new_plot()
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
    return save_plot(fig, ax, path, title, labels, legend="upper left")


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
    print_rows(
        [
            ("teacher accuracy", "-" if teacher is None else f"{teacher:.3f}"),
            ("distill_vs_grpo", "-" if ratio is None else f"{ratio}{bound}"),
            ("wall time", f"{r['wall_seconds']:.0f} s"),
        ]
    )
