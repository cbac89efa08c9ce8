"""The GPU check kit's figures: read from what the runs wrote, summarised, written as JSON + Markdown.

Training figures come from the trainer's ``metrics.jsonl`` (its ``time/*`` phase timers,
``perf/tokens_per_s`` and response lengths), eval figures from the benchmark's ``results.json`` and
``predictions.jsonl``, memory and process-group facts from ``gpu_check_run.py``'s stats file. The
kit adds no timers of its own around the phases it reports.
"""

from __future__ import annotations

import json
import os
from statistics import mean

# the trainer's per-step keys the report keeps (whatever of them a run logged)
STEP_PREFIXES = ("time/", "perf/", "memory/")
STEP_KEYS = ("response/length", "hybrid/online_length", "actor/grad_norm", "reward/overall")
PHASE_KEYS = ("time/data", "time/rollout", "time/logprobs", "time/update", "time/step")


def read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return {}


def _rows(path: str) -> list[dict]:
    rows = []
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by a killed run
                if isinstance(row, dict):
                    rows.append(row)
    except OSError:
        pass
    return rows


def summarize_train(run_dir: str, stats_path: str, prompts: int, online_per_prompt: int) -> dict:
    """One training run: its steps as logged, the means over the measured steps (the first step,
    which pays for CUDA start-up and kernel selection, is left out when there are others), the
    rollout's generated tokens per second (``prompts`` x ``online_per_prompt`` responses of the
    logged mean online length), and the process's peak memory and process group."""
    steps = []
    for row in _rows(os.path.join(run_dir, "metrics.jsonl")):
        if "time/step" not in row:
            continue  # validation-only rows
        keep = {k: v for k, v in row.items() if k.startswith(STEP_PREFIXES) or k in STEP_KEYS}
        steps.append({"step": row.get("step"), **keep})
    out: dict = {"steps_logged": len(steps), "steps": steps}
    measured = steps[1:] if len(steps) > 1 else steps
    if measured:
        keys = sorted({k for s in measured for k in s if k != "step"})
        out["mean"] = {k: round(mean(s[k] for s in measured if k in s), 4) for k in keys}
        out["mean_over_steps"] = [s["step"] for s in measured]
        m = out["mean"]
        # the rollout phase also scores rewards, so this is a lower bound of the engine's own rate
        if "hybrid/online_length" in m and m.get("time/rollout"):
            tokens = m["hybrid/online_length"] * prompts * online_per_prompt
            out["generated_tokens_per_step"] = round(tokens, 1)
            out["rollout_generated_tokens_per_s"] = round(tokens / m["time/rollout"], 1)
    out["process"] = read_json(stats_path)
    out["process"].pop("traceback", None)
    return out


def compare(cache: dict, decode: dict) -> dict:
    """Decode-on-the-fly over cache, per phase (the seed's headline comparison)."""
    a, b = cache.get("mean") or {}, decode.get("mean") or {}
    out = {}
    for key in (*PHASE_KEYS, "perf/tokens_per_s"):
        if a.get(key) and b.get(key) is not None:
            out[key] = round(b[key] / a[key], 3)
    return out


def summarize_eval(bench_dir: str, stats_path: str) -> dict:
    """The synthetic benchmark run: samples/s overall and of the generation stage, output tokens/s."""
    res = read_json(os.path.join(bench_dir, "results.json"))
    out: dict = {"process": read_json(stats_path)}
    out["process"].pop("traceback", None)
    if not res:
        return out
    evaluated = res.get("evaluated") or 0
    seconds = res.get("seconds") or 0.0
    stages = res.get("stage_seconds") or {}
    tokens = sum(
        int(r.get("output_tokens") or 0) for r in _rows(os.path.join(bench_dir, "predictions.jsonl"))
    )
    out.update(
        samples=res.get("samples"),
        evaluated=evaluated,
        failures=res.get("failures"),
        truncated=res.get("truncated"),
        seconds=seconds,
        stage_seconds=stages,
        samples_per_s=round(evaluated / seconds, 3) if seconds else None,
        generate_samples_per_s=round(evaluated / stages["generate"], 3) if stages.get("generate") else None,
        output_tokens=tokens,
        output_tokens_per_s=round(tokens / stages["generate"], 1) if stages.get("generate") else None,
        score=res.get("score"),
    )
    return out


def _fmt(value, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown(report: dict) -> str:
    env = report.get("environment", {})
    lines = [
        f"# easyvideor1 GPU check ({report.get('mode')}): {'OK' if report.get('ok') else 'NOT OK'}",
        "",
        f"Started {report.get('started_utc')}, {report.get('wall_seconds', '-')} s in all. "
        f"{env.get('gpu', 'no GPU')} | torch {env.get('torch')} (CUDA {env.get('cuda')}) | "
        f"transformers {env.get('transformers')} | Python {env.get('python')}",
    ]
    if report.get("error"):
        lines += ["", f"**Error:** {report['error']}"]
    lines += ["", "| phase | status | seconds | limit |", "|---|---|---|---|"]
    for name, p in report.get("phases", {}).items():
        status = p.get("status", "?") + (f" ({p['cuda_error']})" if p.get("cuda_error") else "")
        lines.append(f"| {name} | {status} | {_fmt(p.get('seconds'))} | {_fmt(p.get('limit_s'), 0)} |")
    prep = report.get("prepare") or {}
    if prep.get("model"):
        lines += [
            "",
            f"Model: random-weight Qwen3-VL ({prep['model'].get('size')}), "
            f"{prep['model'].get('parameters', 0) / 1e6:.1f} M parameters, bf16. "
            f"Videos: {prep.get('synth', {}).get('videos')} x {prep.get('synth', {}).get('frames')} frames "
            f"at {'x'.join(map(str, prep.get('synth', {}).get('size', [])))}.",
        ]
    train = report.get("train") or {}
    if train:
        lines += [
            "",
            "RL steps (means over the steps after the first; seconds unless stated):",
            "",
            "| run | steps | step | data | rollout | log-probs | update | tokens/s | "
            "generated tok/s | peak GPU GiB (alloc / reserved) | process group | video loads (cache / decoded) |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for mode, s in train.items():
            if mode == "decode_over_cache":
                continue
            m, proc = s.get("mean") or {}, s.get("process") or {}
            group = f"{proc.get('backend', '-')} x{proc.get('world_size', '-')}"
            loads = proc.get("video_loads") or {}
            lines.append(
                f"| {mode} | {s.get('steps_logged', 0)} | {_fmt(m.get('time/step'))} | "
                f"{_fmt(m.get('time/data'), 3)} | {_fmt(m.get('time/rollout'))} | "
                f"{_fmt(m.get('time/logprobs'))} | {_fmt(m.get('time/update'))} | "
                f"{_fmt(m.get('perf/tokens_per_s'), 0)} | {_fmt(s.get('rollout_generated_tokens_per_s'), 0)} | "
                f"{_fmt(proc.get('max_memory_allocated_gib'))} / {_fmt(proc.get('max_memory_reserved_gib'))} | "
                f"{group} | {loads.get('from_cache', '-')} / {loads.get('decoded', '-')} |"
            )
        ratio = train.get("decode_over_cache") or {}
        if ratio:
            lines += ["", "Decode on the fly / cache: " + ", ".join(f"{k} {v}x" for k, v in ratio.items())]
        ckpt = (train.get("cache_only") or {}).get("process", {}).get("checkpoint_seconds")
        if ckpt:
            secs = ", ".join(f"{c:.1f}" for c in ckpt)
            lines += [f"Checkpoint write (cache run, HF export + sharded weights and optimizer): {secs} s"]
    if report.get("params_changed_fraction") is not None:
        lines += [
            "",
            f"First optimizer step (lr 1e-6, fp32 masters, bf16 compute): "
            f"{100 * report['params_changed_fraction']:.2f}% of the weights with a gradient changed "
            f"(must be > 99%). Attention: {report.get('attention_path')}.",
        ]
    if report.get("memory_by_phase"):
        phases = ", ".join(f"{k} {v:.2f}" for k, v in report["memory_by_phase"].items())
        lines += ["", f"Device memory in use by phase (GiB, mean over steps): {phases}"]
    long = report.get("long_micro_batch") or {}
    if long.get("peak_gib") is not None:
        lines += [
            "",
            f"Long micro-batch ({long.get('prompt_tokens')} + {long.get('response_tokens')} tokens, "
            f"forward + backward): peak {long['peak_gib']:.2f} GiB in {long.get('seconds')} s.",
        ]
    check = report.get("plan_check") or {}
    if check:
        pairs = [
            f"{name} predicted {p['predicted_gib']:.2f} vs measured {_fmt(p['measured_gib'])} GiB"
            for name, p in check.items()
            if isinstance(p, dict) and "predicted_gib" in p
        ]
        lines += ["", "easyvideor1 plan against the kit: " + ("; ".join(pairs) or check.get("error", ""))]
    ev = report.get("eval") or {}
    if ev.get("evaluated") is not None:
        proc = ev.get("process") or {}
        lines += [
            "",
            f"Eval (synthetic, HF engine): {ev['evaluated']}/{ev.get('samples')} samples in "
            f"{_fmt(ev.get('seconds'))} s = {_fmt(ev.get('samples_per_s'), 3)} samples/s "
            f"({_fmt(ev.get('generate_samples_per_s'), 3)} in generation, "
            f"{_fmt(ev.get('output_tokens_per_s'), 0)} output tokens/s); failures {ev.get('failures')}; "
            f"peak GPU {_fmt(proc.get('max_memory_allocated_gib'))} GiB allocated.",
        ]
    lines += ["", "Logs: `logs/<phase>.log`; every figure: `gpu_report.json`."]
    return "\n".join(lines) + "\n"


def write_report(report: dict, out: str) -> None:
    """``gpu_report.json`` and ``gpu_report.md`` in ``out``, each replaced whole."""
    os.makedirs(out, exist_ok=True)
    for name, text in (
        ("gpu_report.json", json.dumps(report, indent=1, default=str)),
        ("gpu_report.md", markdown(report)),
    ):
        tmp = os.path.join(out, f".{name}.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, os.path.join(out, name))
