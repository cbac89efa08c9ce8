"""The GPU check kit's driver: prepare, RL steps from the cache, RL steps decoding on the fly, one
long micro-batch, eval (the shapes and limits of each: ``gpu_check_profiles.py``).

Called by ``tools/gpu_check.sh`` (which installs the carried wheels and sets ``PYTHONPATH`` first).
Every phase is its own process with its own time limit, all inside one overall deadline, so the
kit ends by itself; the report (``gpu_report.json`` + ``gpu_report.md``) is rewritten after every
phase, so a phase that fails or times out still leaves the others' figures. The training figures
are read from the trainer's own ``metrics.jsonl`` (``time/*``, ``perf/*``), eval's from its
``results.json``; peak GPU memory comes from ``gpu_check_run.py`` inside each process.

``--dry-run`` runs the same phases, commands and report on a CPU with tiny shapes (gloo instead of
NCCL), which is what the test suite does.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict

import yaml

TOOLS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, TOOLS)

from gpu_check_plan import plan_check  # noqa: E402
from gpu_check_profiles import DRY_RUN, GPU, PHASES, Profile, run_config  # noqa: E402, F401  (the kit's settings)
from gpu_check_report import compare, read_json, summarize_eval, summarize_train, write_report  # noqa: E402

# Lines that mark a failure of the CUDA path (kernels, NCCL, memory) in a phase's log
CUDA_ERROR_MARKS = (
    "CUDA error",
    "CUDA out of memory",
    "OutOfMemoryError",
    "NCCL error",
    "ncclInternalError",
    "ncclUnhandledCudaError",
    "illegal memory access",
    "CUBLAS_STATUS",
    "CUDNN_STATUS",
    "device-side assert",
)


def cuda_error(log_path: str) -> str | None:
    """The first log line that marks a CUDA-path failure, if any."""
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            for line in f:
                if any(mark in line for mark in CUDA_ERROR_MARKS):
                    return line.strip()[:500]
    except OSError:
        return None
    return None


def log_tail(log_path: str, lines: int = 15) -> str:
    try:
        with open(log_path, encoding="utf-8", errors="replace") as f:
            return "".join(f.readlines()[-lines:])[-3000:]
    except OSError:
        return ""


def run_phase(name: str, cmd: list[str], log_path: str, timeout: float, env: dict) -> dict:
    """Run ``cmd`` in its own process group with a time limit; its output goes to ``log_path``.

    On timeout the whole group is killed (torchrun's workers included), by its id."""
    t0 = time.perf_counter()
    status, rc = "ok", None
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("$ " + " ".join(cmd) + "\n")
        log.flush()
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = proc.wait(timeout=max(1.0, timeout))
            if rc != 0:
                status = "failed"
        except subprocess.TimeoutExpired:
            status = "timeout"
            _kill_group(proc)
            rc = proc.returncode
    result = {
        "status": status,
        "rc": rc,
        "seconds": round(time.perf_counter() - t0, 2),
        "limit_s": round(timeout, 1),
        "log": os.path.basename(log_path),
    }
    if status != "ok":
        result["log_tail"] = log_tail(log_path)
    found = cuda_error(log_path)
    if found:
        result["cuda_error"] = found
        if status == "ok":  # an error printed by a process that still exited 0 is still an error
            result["status"] = "failed"
    print(f"[gpu_check] {name}: {result['status']} in {result['seconds']} s", flush=True)
    return result


def _kill_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def environment(dry_run: bool) -> dict:
    """What the kit ran on: Python, torch/CUDA, GPU, transformers, and where imports resolved."""
    import platform

    import torch
    import transformers

    env: dict = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "transformers": transformers.__version__,
        "pythonpath": os.environ.get("PYTHONPATH", ""),
        "wheels_dir": os.environ.get("GPU_CHECK_WHEELS_DIR", ""),
        "wheels_target": os.environ.get("GPU_CHECK_SITE", ""),
        "wheels_installed": sorted(
            d[: -len(".dist-info")]
            for d in os.listdir(os.environ.get("GPU_CHECK_SITE") or os.devnull)
            if d.endswith(".dist-info")
        )
        if os.path.isdir(os.environ.get("GPU_CHECK_SITE") or "")
        else [],
    }
    if torch.cuda.is_available():
        try:  # facts for the report only: a query that fails here must not stop the check
            props = torch.cuda.get_device_properties(0)
            env.update(
                gpu=props.name,
                gpu_memory_gib=round(props.total_memory / 2**30, 1),
                gpus=torch.cuda.device_count(),
                capability=list(torch.cuda.get_device_capability(0)),
            )
            nccl = torch.cuda.nccl.version()
            env["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        except Exception as e:
            env["gpu_query_error"] = f"{type(e).__name__}: {e}"
    imports = {}
    for module in ("av", "omegaconf", "math_verify", "rapidfuzz", "rouge_score", "pycocotools", "nltk"):
        try:
            imports[module] = getattr(__import__(module), "__file__", "?")
        except Exception as e:  # a missing wheel shows here, and fails the phases that need it
            imports[module] = f"not importable: {type(e).__name__}: {e}"
    env["imports"] = imports
    return env


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="gpu_report", help="report directory (small: report + logs)")
    ap.add_argument("--work", required=True, help="scratch directory (model, videos, cache, runs)")
    ap.add_argument("--dry-run", action="store_true", help="tiny shapes on the CPU, gloo")
    ap.add_argument("--started", type=float, default=None, help="epoch seconds the kit started")
    ap.add_argument("--steps", type=int, help="RL steps per run (default: the profile's)")
    ap.add_argument("--install", default="skipped", choices=["ok", "failed", "skipped"])
    ap.add_argument("--install-seconds", type=float, default=0.0)
    args = ap.parse_args(argv)

    profile = DRY_RUN if args.dry_run else GPU
    if args.steps:
        profile.steps = args.steps
    started = args.started or time.time()
    deadline = started + profile.deadline_s
    out, work = os.path.abspath(args.out), os.path.abspath(args.work)
    logs = os.path.join(out, "logs")
    os.makedirs(logs, exist_ok=True)
    os.makedirs(work, exist_ok=True)
    report: dict = {
        "kit": "easyvideor1 tools/gpu_check.sh",
        "mode": "dry-run" if args.dry_run else "gpu",
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "settings": asdict(profile),
        "phases": {},
    }
    # the carried wheels' install, done by gpu_check.sh before this driver started
    report["phases"]["install"] = {
        "status": args.install,
        "seconds": args.install_seconds,
        "log": "install.log",
    }
    if args.install == "failed":
        report["phases"]["install"]["log_tail"] = log_tail(os.path.join(logs, "install.log"))
        report["error"] = "pip could not install the carried wheels (logs/install.log)"
        return _finish(report, out, started, ok=False, code=1)
    report["environment"] = environment(args.dry_run)
    if not args.dry_run and not report["environment"]["cuda_available"]:
        report["error"] = "no CUDA device visible: run on the GPU machine, or use --dry-run on a CPU"
        return _finish(report, out, started, ok=False, code=2)

    cfg = run_config(profile, work)
    run_yaml = os.path.join(work, "run.yaml")
    with open(run_yaml, "w", encoding="utf-8") as f:
        yaml.safe_dump(cfg, f, sort_keys=False)
    report["run_config"] = cfg
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    py = sys.executable

    def limit(name: str) -> float:
        return min(profile.limits[name], deadline - time.time())

    def phase(name: str, cmd: list[str]) -> bool:
        if limit(name) < 5:
            report["phases"][name] = {"status": "skipped", "reason": "overall deadline reached"}
            return False
        report["phases"][name] = run_phase(name, cmd, os.path.join(logs, f"{name}.log"), limit(name), env)
        return report["phases"][name]["status"] == "ok"

    # 1. model, videos, cache
    settings_path = os.path.join(work, "prepare_settings.json")
    with open(settings_path, "w", encoding="utf-8") as f:
        json.dump({**asdict(profile), "synth_dir": os.path.join(work, "synth"), "device": profile.device}, f)
    prepared_path = os.path.join(work, "prepared.json")
    _clear(prepared_path)
    ok = phase(
        "prepare", [py, os.path.join(TOOLS, "gpu_check_prepare.py"), run_yaml, settings_path, prepared_path]
    )
    if os.path.exists(prepared_path):
        with open(prepared_path, encoding="utf-8") as f:
            report["prepare"] = json.load(f)
    write_report(report, out)
    if not ok:
        for name in PHASES[1:]:
            report["phases"][name] = {"status": "skipped", "reason": "prepare did not succeed"}
        return _finish(report, out, started, ok=False, code=1)

    # 2./3. RL steps from the cache, then decoding every video on the fly
    report["train"] = {}
    for name, mode in (("train_cache", "cache_only"), ("train_decode", "decode_only")):
        run_dir = os.path.join(work, name)
        stats = os.path.join(work, f"{name}_process.json")
        _clear(run_dir, stats)  # a reused work directory: metrics.jsonl appends, never mix runs
        cmd = [
            py,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "1",
            os.path.join(TOOLS, "gpu_check_run.py"),
            stats,
            "train",
            f"config={run_yaml}",
            f"data.cache_mode={mode}",
            f"trainer.output_dir={run_dir}",
        ]
        # the checkpoint path (DCP over NCCL) is checked once, in the cache run; the decode run
        # skips its final save so the minutes go to measuring
        env["GPU_CHECK_SKIP_SAVE"] = "1" if name == "train_decode" else ""
        phase(name, cmd)
        # n - 1 responses per group are generated (one is the record's offline gold response)
        report["train"][mode] = summarize_train(run_dir, stats, profile.prompts_per_step, profile.n - 1)
        shutil.rmtree(os.path.join(run_dir, "checkpoints"), ignore_errors=True)  # GBs; not needed
        write_report(report, out)
    env.pop("GPU_CHECK_SKIP_SAVE", None)
    report["train"]["decode_over_cache"] = compare(
        report["train"]["cache_only"], report["train"]["decode_only"]
    )
    cache_run = report["train"]["cache_only"]
    first = cache_run.get("process", {}).get("first_update") or {}
    report["params_changed_fraction"] = first.get("params_changed_fraction")
    report["attention_path"] = cache_run.get("process", {}).get("attention_path")
    report["memory_by_phase"] = {
        k[len("memory/") : -len("_gib")]: v
        for k, v in (cache_run.get("mean") or {}).items()
        if k.startswith("memory/")
    }

    # the 8B recipe's longest sequence through the log-prob path, forward and backward, on the 2B model
    long_path = os.path.join(work, "long_micro_batch.json")
    _clear(long_path)
    phase(
        "long_micro_batch",
        [
            py,
            os.path.join(TOOLS, "gpu_check_long.py"),
            cfg["model"]["path"],
            str(profile.long_prompt_tokens),
            str(profile.long_response_tokens),
            long_path,
        ],
    )
    report["long_micro_batch"] = read_json(long_path)
    report["long_micro_batch_peak_gib"] = report["long_micro_batch"].get("peak_gib")
    measured = {
        "update_peak": report["memory_by_phase"].get("update_peak"),
        "long_micro_batch": report["long_micro_batch"].get("peak_above_weights_gib"),
    }
    try:  # the planner's figures beside the kit's; a planner bug must not cost the measurements
        memory = report["environment"].get("gpu_memory_gib") or 80.0
        report["plan_check"] = plan_check(cfg, profile, memory, measured)
    except Exception as e:
        report["plan_check"] = {"error": f"{type(e).__name__}: {e}"}
    write_report(report, out)

    # 4. the synthetic benchmark with the HF engine
    eval_dir = os.path.join(work, "eval")
    stats = os.path.join(work, "eval_process.json")
    _clear(eval_dir, stats)  # eval resumes recorded samples: a reused work directory must not
    phase(
        "eval",
        [
            py,
            os.path.join(TOOLS, "gpu_check_run.py"),
            stats,
            "eval",
            "--model",
            cfg["model"]["path"],
            "--benchmarks",
            "synthetic",
            "--video-root",
            os.path.join(work, "synth"),
            "--out",
            eval_dir,
            "--engine",
            "hf",
            "--dtype",
            "bfloat16",
            "--max-new-tokens",
            str(profile.eval_max_new_tokens),
            "--max-samples",
            str(profile.eval_samples),
            "--batch-size",
            str(profile.eval_batch_size),
            "--load-workers",
            str(min(profile.workers, 4)),
            f"config={run_yaml}",
        ],
    )
    report["eval"] = summarize_eval(os.path.join(eval_dir, "synthetic"), stats)
    if report["phases"]["eval"]["status"] == "ok" and report["eval"].get("failures"):
        report["phases"]["eval"]["status"] = "failed"
        report["phases"]["eval"]["reason"] = f"{report['eval']['failures']} samples failed"
    ok = all(report["phases"][name].get("status") == "ok" for name in PHASES)
    return _finish(report, out, started, ok=ok, code=0 if ok else 1)


def _clear(*paths: str) -> None:
    for path in paths:
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.unlink(path)


def _finish(report: dict, out: str, started: float, ok: bool, code: int) -> int:
    report["ok"] = ok
    report["wall_seconds"] = round(time.time() - started, 1)
    report["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    write_report(report, out)
    print(f"[gpu_check] {'ok' if ok else 'FAILED'}: {os.path.join(out, 'gpu_report.md')}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
