"""The demo's RL step alone and beside 1 and 3 CPU-bound processes: torch's default threads vs
``easyvideor1.threads`` (issue 22 item 3).

Each measurement is a fresh process (thread pools are fixed per process) that builds the trainer
on the demo config (``configs/demo.yaml``, no warm-up, no validation), runs one untimed step and
then ``--steps`` timed ones (``time/step``, median). The competing processes are
``python -c "while True: pass"`` on the same CPUs (they inherit this process's affinity), started
before the trainer so that its start-up sees them, as a job starting on a busy machine does.
Both behaviours run in the same round at each load, alternately, ``--repeats`` rounds.

- old: ``cpu.threads`` = torch's default intra-op count in a fresh process (one per core);
- new: ``cpu.threads=0``, the trainer's own choice (``easyvideor1.threads.apply``).

``OMP_NUM_THREADS`` is removed from the children's environment (it would decide for both).
Prints one JSON line: the new behaviour's ``quiet_step_s``, ``loaded1_step_s``,
``loaded3_step_s``, ``ratio1``, ``ratio3`` (loaded / quiet), the same with an ``old_`` prefix, the
threads each chose, the per-round figures and the cores other programs kept busy before each load
level (``background_busy_cpus``). ``--smoke``: one round, one step not warmed up, 16 records, new only,
the competing processes at the lowest priority (it checks that the benchmark runs, not its figures;
at full priority its busy loops would take the cores from whatever runs beside it, the test suite).
Run it alone: anything else busy on the machine is load it does not control.

Usage: python benchmarks/threads_under_load.py [--steps N] [--repeats N] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from easyvideor1.threads import busy_cpus  # noqa: E402

LOADS = (0, 1, 3)
# the --smoke JSON line's keys (tests/benchmarks/test_smoke.py checks them); the full line adds
# the same with an old_ prefix (torch's default threads) before background_busy_cpus
RESULT_KEYS = (
    "quiet_step_s",
    "loaded1_step_s",
    "loaded3_step_s",
    "ratio1",
    "ratio3",
    "threads",
    "rounds_step_s",
    "background_busy_cpus",
)
_KEYS = {0: "quiet_step_s", 1: "loaded1_step_s", 3: "loaded3_step_s"}

# every process started here dies with this one (a killed benchmark must not leave busy loops behind)
_DIE = "\nfrom easyvideor1.media.workers import die_with_parent\ndie_with_parent(%d)\n"
_HOG = _DIE + "while True: pass\n"
_IDLE_HOG = _DIE + "import os\nos.nice(19)\nwhile True: pass\n"  # --smoke: runs only on idle cores

# the child: build the demo trainer, time the steps, print one JSON line
_CHILD = r"""
import json, statistics, sys
import torch

from easyvideor1.config import RunConfig, load_config
from easyvideor1.demo import demo_config_path
from easyvideor1.trainer.loop import Trainer

mode, work, out, steps, warm = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
threads = torch.get_num_threads() if mode == "old" else 0  # torch's default, before anything sets it
cfg = load_config(RunConfig, demo_config_path(), [
    f"data.train_files=[{work}/data/train.jsonl]", "data.val_files=[]", f"model.path={work}/model",
    f"data.cache_dir={work}/cache", "data.cache_mode=cache_only", f"trainer.output_dir={out}",
    "trainer.loggers=[]", "trainer.sft_warmup_steps=0", f"trainer.max_steps={steps + warm}",
    "trainer.resume=never", "trainer.save_every=0", "trainer.val_every=0", f"cpu.threads={threads}",
])
trainer = Trainer(cfg)
times = [trainer.rl_step()["time/step"] for _ in range(steps + warm)][warm:]  # the first warms up
print(json.dumps({"step_s": statistics.median(times), "threads": torch.get_num_threads()}))
"""


def prepare(work: Path, n_train: int = 64) -> None:
    from easyvideor1.config import RunConfig, load_config
    from easyvideor1.data.preprocess import preprocess
    from easyvideor1.data.synthetic import write_demo_set
    from easyvideor1.demo import demo_config_path
    from easyvideor1.models.tiny import make_tiny_model
    from easyvideor1.resolve import resolve_data

    train, _ = write_demo_set(str(work / "data"), n_train=n_train, n_val=8)
    model = make_tiny_model(str(work / "model"))
    cfg = load_config(RunConfig, demo_config_path(), [f"model.path={model}"])
    preprocess([train], resolve_data(cfg.data, model), str(work / "cache"), workers=1, progress=False)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env.update(PYTHONPATH=str(ROOT / "src"), TOKENIZERS_PARALLELISM="false")
    return env


def measure(mode: str, work: Path, steps: int, run: int, warm: int = 1) -> dict:
    out = work / f"run{run}-{mode}"
    r = subprocess.run(
        [sys.executable, "-c", _DIE % os.getpid() + _CHILD, mode, str(work), str(out), str(steps), str(warm)],
        env=_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    if r.returncode:
        raise SystemExit(f"the {mode} measurement failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6, help="timed RL steps per measurement")
    ap.add_argument("--repeats", type=int, default=1, help="rounds (each: every load, both behaviours)")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="one round, one step (not warmed up), 16 records, the new behaviour only",
    )
    args = ap.parse_args()
    steps, repeats, modes = (1, 1, ("new",)) if args.smoke else (args.steps, args.repeats, ("old", "new"))
    with tempfile.TemporaryDirectory(prefix="evr1-threads-") as work:
        print(json.dumps(run_all(Path(work), steps, repeats, modes, smoke=args.smoke)))


def run_all(work: Path, steps: int, repeats: int, modes: tuple[str, ...], smoke: bool = False) -> dict:
    prepare(work, n_train=16 if smoke else 64)
    rounds: dict[str, dict[int, list[dict]]] = {m: {n: [] for n in LOADS} for m in modes}
    run, background = 0, []
    hog = _IDLE_HOG if smoke else _HOG
    for _ in range(repeats):
        for load in LOADS:
            # cores others kept busy just before (other jobs on a shared machine are load we do not control)
            background.append(round(busy_cpus(sample_s=0.5), 2))
            hogs = [
                subprocess.Popen([sys.executable, "-c", hog % os.getpid()], env=_env()) for _ in range(load)
            ]
            try:
                for mode in modes:
                    run += 1
                    rounds[mode][load].append(measure(mode, work, steps, run, warm=0 if smoke else 1))
            finally:
                for h in hogs:
                    h.kill()
                    h.wait()
    result: dict = {}
    for mode in ("new", "old"):
        if mode not in rounds:
            continue
        prefix = "" if mode == "new" else "old_"
        step = {n: statistics.median(r["step_s"] for r in rounds[mode][n]) for n in LOADS}
        for n in LOADS:
            result[prefix + _KEYS[n]] = round(step[n], 3)
        result[prefix + "ratio1"] = round(step[1] / step[0], 2)
        result[prefix + "ratio3"] = round(step[3] / step[0], 2)
        result[prefix + "threads"] = {_KEYS[n]: [r["threads"] for r in rounds[mode][n]] for n in LOADS}
        result[prefix + "rounds_step_s"] = {
            _KEYS[n]: [round(r["step_s"], 3) for r in rounds[mode][n]] for n in LOADS
        }
    result["background_busy_cpus"] = background
    return result


if __name__ == "__main__":
    main()
