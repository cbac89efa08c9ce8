"""RL steps per second, ``rollout.mode=sync`` vs ``one_step_off``, one run, ratio printed.

Same demo records, tiny Qwen3-VL, HF engine and settings; responses long enough (min_new_tokens =
max_new_tokens) that the rollout weighs like the update. Both runs put the engine in its own
process (``rollout.placement: separate``): one intra-op thread for the trainer, one for the
engine, so on two cores each has a core. ``sync`` waits for the engine, then updates;
``one_step_off`` has the engine generate the next step's rollouts during the update, on the
weights pushed after the previous one. The first step of each run is left out (start-up, and
``one_step_off`` has nothing ahead yet).

Printed: ``async_vs_sync`` (sync step time / one_step_off step time) and ``overlap_efficiency``
(the ideal overlapped step over the measured one_step_off step), with the stage times. The ideal
is max(engine side, trainer side): the engine side is the sync run's data + rollout (what the
rollout thread does), the trainer side the one_step_off run's own step less the time it waited
for its batch (its log-probs, update and bookkeeping), so the bound can never pass the step.
Usage: python benchmarks/async_rollout.py [--steps 12] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's package, not an installed copy

import torch  # noqa: E402

from easyvideor1.config import RunConfig, load_config  # noqa: E402
from easyvideor1.data.synthetic import write_demo_set  # noqa: E402
from easyvideor1.models.tiny import make_tiny_model  # noqa: E402
from easyvideor1.trainer.loop import Trainer  # noqa: E402

RESULT_KEYS = (
    "async_vs_sync",
    "overlap_efficiency",
    "sync_step_s",
    "one_step_off_step_s",
    "sync_data_s",
    "sync_rollout_s",
    "sync_logprobs_s",
    "sync_update_s",
    "one_step_off_wait_s",
    "ideal_step_s",
    "steps",
)


def run(d: Path, mode: str, steps: int, tokens: int, prompts: int, n: int) -> list[dict]:
    overrides = [
        f"data.train_files=[{d / 'data' / 'train.jsonl'}]",
        f"model.path={d / 'model'}",
        f"trainer.output_dir={d / mode}",
        "data.video_nframes=4",
        "data.video_fps=null",
        "data.video_min_pixels=1024",
        "data.video_max_pixels=1024",
        f"rollout.n={n}",
        f"rollout.max_new_tokens={tokens}",
        f"rollout.min_new_tokens={tokens}",
        f"trainer.prompts_per_step={prompts}",
        f"trainer.mini_batch_prompts={prompts}",
        f"trainer.micro_batch_size={prompts * n}",
        f"trainer.max_steps={steps}",
        "trainer.val_size=0",
        "trainer.loggers=[]",
        "trainer.save_every=0",
        f"rollout.mode={mode}",
        "rollout.placement=separate",
        "cpu.threads=1",
    ]
    trainer = Trainer(load_config(RunConfig, None, overrides))
    rows = []
    try:
        trainer.restore()
        while trainer.state.step < steps:
            m = trainer.rl_step()
            trainer.state.step += 1
            rows.append({k: v for k, v in m.items() if k.startswith("time/")})
    finally:
        trainer.close()
    return rows[1:]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--smoke", action="store_true", help="2 measured steps of tiny sizes, the same keys")
    a = p.parse_args()
    steps, tokens, prompts, n = (3, 8, 2, 2) if a.smoke else (a.steps + 1, 48, 8, 8)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        write_demo_set(str(d / "data"), n_train=64, n_val=4)
        make_tiny_model(str(d / "model"), "qwen3_vl")
        sync = run(d, "sync", steps, tokens, prompts, n)
        ahead = run(d, "one_step_off", steps, tokens, prompts, n)
    med = lambda rows, k: statistics.median(r[k] for r in rows)  # noqa: E731
    sync_step, ahead_step = med(sync, "time/step"), med(ahead, "time/step")
    data, rollout = med(sync, "time/data"), med(sync, "time/rollout")
    logprobs, update = med(sync, "time/logprobs"), med(sync, "time/update")
    wait = statistics.median(r["time/data"] + r["time/rollout"] for r in ahead)
    busy = statistics.median(r["time/step"] - r["time/data"] - r["time/rollout"] for r in ahead)
    ideal = max(data + rollout, busy)  # per step busy <= step, so the bound never passes it
    out = {
        "async_vs_sync": sync_step / ahead_step,
        "overlap_efficiency": ideal / ahead_step,
        "sync_step_s": sync_step,
        "one_step_off_step_s": ahead_step,
        "sync_data_s": data,
        "sync_rollout_s": rollout,
        "sync_logprobs_s": logprobs,
        "sync_update_s": update,
        "one_step_off_wait_s": wait,
        "ideal_step_s": ideal,
        "steps": len(sync),
    }
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}))


if __name__ == "__main__":
    main()
