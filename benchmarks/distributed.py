"""RL step time on 1 process versus 2 torchrun ranks (gloo, FSDP2), and token balancing across ranks.

Same demo config with mixed video/image/text records (questions padded with 0-390 words of context so
prompt lengths vary), same global batch (prompts_per_step) and
cache, no warm-up and no validation; each variant runs a few RL steps and we report the mean step
time after the first step, tokens per second, and the per-rank token imbalance (max over mean).
On a 2-core CPU machine the 2-rank run has one core per rank (the single process has both), so its
ratio shows the data-parallel overhead rather than a speed-up; on GPUs each rank has its own device.
Usage: python benchmarks/distributed.py [--steps N] [--smoke]  (``--smoke``: tiny sizes, the same keys)
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from easyvideor1.config import RunConfig, load_config  # noqa: E402
from easyvideor1.data.preprocess import preprocess  # noqa: E402
from easyvideor1.data.synthetic import write_demo_set  # noqa: E402
from easyvideor1.demo import demo_config_path  # noqa: E402
from easyvideor1.models.tiny import make_tiny_model  # noqa: E402
from easyvideor1.resolve import resolve_data  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(work: Path, name: str, ranks: int, overrides: list[str]) -> dict[str, float]:
    out = work / name
    args = [
        "-m",
        "easyvideor1",
        "train",
        f"config={demo_config_path()}",
        f"trainer.output_dir={out}",
        *overrides,
    ]
    if ranks > 1:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc-per-node={ranks}",
            f"--master-port={_port()}",
        ]
        cmd += args
    else:
        cmd = [sys.executable, *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        raise SystemExit(f"{name} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in rows if "time/step" in m][1:]  # the first step warms caches up
    return {
        "step_s": statistics.mean(m["time/step"] for m in steps),
        "tokens_per_s": statistics.mean(m["perf/tokens_per_s"] for m in steps),
        "imbalance": statistics.mean(m.get("perf/rank_token_imbalance", 1.0) for m in steps),
    }


def _vary_lengths(path: str) -> None:
    """Prepend 0-400 words of context to the questions, so prompt lengths differ as in real data
    (otherwise every demo prompt has about the same length and there is nothing to balance)."""
    import random

    rng = random.Random(0)
    rows = [json.loads(line) for line in open(path)]
    for r in rows:
        r["problem"] = "Context: " + "the square moves " * rng.choice([0, 0, 10, 40, 130]) + r["problem"]
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


# the JSON line's keys, full and --smoke (tests/benchmarks/test_smoke.py checks them)
RESULT_KEYS = (
    "step_s_1_process",
    "step_s_2_ranks",
    "step_s_2_ranks_balanced",
    "tokens_per_s_1_process",
    "tokens_per_s_2_ranks",
    "tokens_per_s_2_ranks_balanced",
    "imbalance_2_ranks",
    "imbalance_2_ranks_balanced",
    "two_ranks_vs_one_step_time",
)
# --smoke: 4 prompts with 2 responses each per step (the demo's are 8 x 8), on 4 records
SMOKE = ["trainer.prompts_per_step=4", "trainer.mini_batch_prompts=4", "rollout.n=2"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=None, help="RL steps per variant (default 6; smoke 2)")
    ap.add_argument(
        "--smoke", action="store_true", help="tiny sizes (seconds): checks it runs, not its figures"
    )
    args = ap.parse_args()
    args.steps = args.steps or (2 if args.smoke else 6)  # the first step is not timed
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        train, _ = write_demo_set(str(work / "data"), n_train=4 if args.smoke else 64, n_val=4, mixed=True)
        _vary_lengths(train)
        model = make_tiny_model(str(work / "model"), "qwen3vl")
        base = [
            f"data.train_files=[{train}]",
            "data.val_files=[]",
            f"model.path={model}",
            f"data.cache_dir={work / 'cache'}",
            "data.cache_mode=cache_only",
            "demo.prepare=false",
            "trainer.sft_warmup_steps=0",
            f"trainer.max_steps={args.steps}",
            "trainer.save_every=0",
            "trainer.loggers=[jsonl]",
            "data.max_prompt_length=2048",
            *(SMOKE if args.smoke else []),
        ]
        cfg: RunConfig = load_config(RunConfig, demo_config_path(), base)
        # the cache with the settings the trainer derives at start-up: the run's data config with the
        # checkpoint's family (resolve.py); any other copy of them can drift from the trainer's
        data = resolve_data(cfg.data, cfg.model.path)
        preprocess([train], data, data.cache_dir, workers=2, progress=False)
        one = run(work, "one", 1, base)
        two = run(work, "two", 2, base)
        balanced = run(work, "two_balanced", 2, [*base, "distributed.balance_tokens=true"])
    print(f"{'variant':<28}{'step (s)':>10}{'tokens/s':>10}{'rank imbalance':>16}")
    for name, r in (
        ("1 process", one),
        ("2 ranks (FSDP2, gloo)", two),
        ("2 ranks, balance_tokens", balanced),
    ):
        print(f"{name:<28}{r['step_s']:>10.3f}{r['tokens_per_s']:>10.0f}{r['imbalance']:>16.3f}")
    print(f"step time 2 ranks / 1 process: {two['step_s'] / one['step_s']:.2f}x")
    print(f"imbalance without / with balancing: {two['imbalance']:.3f} / {balanced['imbalance']:.3f}")
    figures = {}
    for suffix, r in (("1_process", one), ("2_ranks", two), ("2_ranks_balanced", balanced)):
        figures[f"step_s_{suffix}"] = round(r["step_s"], 3)
        figures[f"tokens_per_s_{suffix}"] = round(r["tokens_per_s"])
        if suffix != "1_process":
            figures[f"imbalance_{suffix}"] = round(r["imbalance"], 3)
    figures["two_ranks_vs_one_step_time"] = round(two["step_s"] / one["step_s"], 2)
    print(json.dumps({k: figures[k] for k in RESULT_KEYS}))


if __name__ == "__main__":
    main()
