"""Training step time with and without benchmark evaluation in the background (``trainer.eval``).

The same tiny Qwen3-VL demo run twice in one process, back to back: without evaluation, then
with ``trainer.eval.every`` evaluating the step checkpoints in a background process
(``easyvideor1 eval`` on a held-out records file). Printed: the mean step time of each
(``time/step`` of ``metrics.jsonl``, the first step left out as warm-up),
``with_eval_vs_without`` (their ratio: on a CPU machine the evaluation process takes its share of
the cores; on GPUs it runs on its own device), the evaluations' mean duration, and
``overlapped``: whether training went on while an evaluation ran (a later step started before
the evaluation of an earlier one had finished).
Usage: python benchmarks/background_eval.py [--steps 12] [--every 4] [--samples 16] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's package, not an installed copy

RESULT_KEYS = (
    "with_eval_vs_without",
    "step_s_without_eval",
    "step_s_with_eval",
    "eval_s_mean",
    "evaluations",
    "overlapped",
    "steps",
)


def run(tmp: Path, name: str, steps: int, extra: list[str]) -> tuple[list[dict], list[float]]:
    """One training run: its metrics rows and when each step started."""
    from easyvideor1.config import RunConfig, load_config
    from easyvideor1.trainer.loop import Trainer

    out = tmp / name
    cfg = load_config(
        RunConfig,
        str(ROOT / "configs" / "demo.yaml"),
        [
            f"data.train_files=[{tmp / 'data' / 'train.jsonl'}]",
            f"data.val_files=[{tmp / 'data' / 'val.jsonl'}]",
            f"model.path={tmp / 'model'}",
            "demo.prepare=false",
            f"data.cache_dir={tmp / 'cache'}",
            f"trainer.output_dir={out}",
            f"trainer.max_steps={steps}",
            "trainer.val_size=0",
            "trainer.sft_warmup_steps=0",
            "trainer.save_every=0",
            "trainer.loggers=[jsonl]",
            "cpu.threads=1",
            *extra,
        ],
    )
    trainer = Trainer(cfg)
    starts: list[float] = []
    step = trainer.rl_step

    def timed():
        starts.append(time.time())
        return step()

    trainer.rl_step = timed
    trainer.train()
    trainer.close()
    rows = [json.loads(line) for line in open(out / "metrics.jsonl")]
    return rows, starts


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--every", type=int, default=4)
    p.add_argument("--samples", type=int, default=16)
    p.add_argument("--smoke", action="store_true", help="3 steps, evaluated at 2 and 3 on 2 samples")
    a = p.parse_args()
    steps, every, samples = (3, 2, 2) if a.smoke else (a.steps, a.every, a.samples)
    import torch

    from easyvideor1.data.synthetic import write_demo_set
    from easyvideor1.models.tiny import make_tiny_model

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        write_demo_set(str(tmp / "data"), n_train=64, n_val=max(samples, 4))
        make_tiny_model(str(tmp / "model"), "qwen3vl")
        plain, _ = run(tmp, "plain", steps, [])
        evals = [
            f"trainer.eval.every={every}",
            f"trainer.eval.data=[{tmp / 'data' / 'val.jsonl'}]",
            f"trainer.eval.max_samples={samples}",
        ]
        evaluated, starts = run(tmp, "with_eval", steps, evals)
        logged = [json.load(open(p)) for p in sorted((tmp / "with_eval" / "eval").glob("step_*/logged.json"))]
        ends = {
            row["step"]: os.path.getmtime(
                tmp / "with_eval" / "eval" / f"step_{row['step']}" / "results" / "results.json"
            )
            for row in logged
        }
    overlapped = any(starts[k] < end for step, end in ends.items() for k in range(step, len(starts)))

    def step_s(rows: list[dict]) -> float:
        times = [r["time/step"] for r in rows if "time/step" in r][1:]
        return statistics.mean(times)

    without, with_eval = step_s(plain), step_s(evaluated)
    out = {
        "with_eval_vs_without": with_eval / without,
        "step_s_without_eval": without,
        "step_s_with_eval": with_eval,
        "eval_s_mean": statistics.mean(row["metrics"]["eval/seconds"] for row in logged),
        "evaluations": len(logged),
        "overlapped": overlapped,
        "steps": steps,
    }
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}))


if __name__ == "__main__":
    main()
