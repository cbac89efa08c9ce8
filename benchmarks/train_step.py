"""RL step time with the frame cache vs on-the-fly decoding, on the demo config (one run, ratios printed).

Two video sets, same trainer settings:
- the demo's own videos (32x32, 4 frames): decoding is nearly free, so the cache barely matters;
- realistic sources (10 s, 640x360, 30 fps) sampled to the same 4 tiny frames: decoding a real
  video dominates a tiny model's step, as it dominates a big model's rollout/log-prob phases in
  the reference's measurement (1.47x overall there).
Each variant runs a few RL steps after one warm-up step; the mean step time and its data-loading
share are reported.

``--profile realistic`` runs the realistic-profile training step instead (``_step_profile.py``):
padded vs packed, fixed vs token-budget micro-batches, re-encoded vs reused vision features, all on
vs all off, with peak memory (issue 13 part 2). ``--profile all`` (the default) runs both and
prints one JSON line with every figure. The cache each cache variant reads is built from the same
run config as its trainer (``build_cache``). ``--smoke``: tiny sizes, the same keys.
Usage: python benchmarks/train_step.py [--steps N] [--profile cache|realistic|all] [--smoke]
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

from easyvideor1.config import RunConfig, load_config  # noqa: E402
from easyvideor1.data.preprocess import preprocess  # noqa: E402
from easyvideor1.data.synthetic import random_scene, render_frames, write_demo_set  # noqa: E402
from easyvideor1.demo import demo_config_path  # noqa: E402
from easyvideor1.media.encode import encode_video  # noqa: E402
from easyvideor1.models.tiny import make_tiny_model  # noqa: E402
from easyvideor1.resolve import resolve_data  # noqa: E402
from easyvideor1.trainer.loop import Trainer  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from _step_profile import REALISTIC_KEYS, realistic_profile  # noqa: E402


def realistic_set(src: Path, out: Path, n: int, seconds: float) -> str:
    """The demo records, pointed at ``seconds``-long 640x360 videos instead of the 32x32 ones."""
    import random

    rows = [json.loads(line) for line in open(src)][:n]
    (out / "videos").mkdir(parents=True, exist_ok=True)
    for i, r in enumerate(rows):
        scene = random_scene(random.Random(i), 640, 360, 30.0, seconds)
        path = out / "videos" / f"real_{i}.mp4"
        encode_video(str(path), render_frames(scene, i), 30.0)
        r["videos"] = [str(path)]
    data = out / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(data)


# the JSON line's keys, full and --smoke, with --profile all (tests/benchmarks/test_smoke.py checks them)
RESULT_KEYS = (
    *REALISTIC_KEYS,
    "decode_vs_cache_demo",
    "step_s_cached_demo",
    "step_s_decoded_demo",
    "decode_vs_cache_sources",
    "step_s_cached_sources",
    "step_s_decoded_sources",
)
# --smoke: two prompts with two responses each per step (the demo's are 8 x 8)
SMOKE = ["trainer.prompts_per_step=2", "trainer.mini_batch_prompts=2", "rollout.n=2"]


def run_config(
    train: str, model: str, cache: str, mode: str, steps: int, work: Path, smoke: bool = False
) -> RunConfig:
    """The demo config on ``train``; the trainer and the cache it reads are both built from it."""
    return load_config(
        RunConfig,
        demo_config_path(),
        [
            *(SMOKE if smoke else []),
            f"data.train_files=[{train}]",
            "data.val_files=[]",
            f"model.path={model}",
            f"data.cache_dir={cache}",
            f"data.cache_mode={mode}",
            f"trainer.output_dir={work / mode}",
            "trainer.loggers=[]",
            "trainer.sft_warmup_steps=0",
            f"trainer.max_steps={steps + 1}",
            "trainer.resume=never",
        ],
    )


def build_cache(cfg: RunConfig) -> None:
    """The frame cache of ``cfg``'s records, with the sampling settings its trainer will ask for:
    the run's data config with the checkpoint's family, as the trainer derives it at start-up
    (``trainer/build.py``) and ``easyvideor1 demo`` builds its cache (a copy made any other way
    drifts, and ``cache_only`` then finds no entry)."""
    data = resolve_data(cfg.data, cfg.model.path)
    report = preprocess(data.train_files, data, data.cache_dir, workers=2, progress=False)
    if report["failed"] or report["bad_records"]:
        raise SystemExit(
            f"preprocess failed for {report['failed']} video(s): see {data.cache_dir}/failures.jsonl"
        )


def step_times(cfg: RunConfig, steps: int) -> tuple[float, float]:
    """Mean step time and data-loading time of ``steps`` RL steps after a warm-up one."""
    t = Trainer(cfg)
    times, data = [], []
    for i in range(steps + 1):
        m = t.rl_step()
        if i:  # skip the warm-up step
            times.append(m["time/step"])
            data.append(m["time/data"])
    return statistics.mean(times), statistics.mean(data)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=None, help="timed RL steps per variant (default 5; smoke 1)")
    ap.add_argument("--profile", choices=("cache", "realistic", "all"), default="all")
    ap.add_argument(
        "--smoke", action="store_true", help="tiny sizes (seconds): checks it runs, not its figures"
    )
    args = ap.parse_args()
    steps = args.steps or (1 if args.smoke else 5)
    # full: 64 records, 10 s sources; smoke: one batch of records, 1 s sources
    records, seconds = (2, 1.0) if args.smoke else (64, 10.0)
    work = Path(tempfile.mkdtemp(prefix="evr1-step-"))
    results: dict[str, float] = {}
    if args.profile in ("realistic", "all"):
        results.update(realistic_profile(work / "realistic", min(steps, 2), smoke=args.smoke))
    if args.profile in ("cache", "all"):
        demo_train, _ = write_demo_set(str(work / "demo"), n_train=records, n_val=2)
        model = make_tiny_model(str(work / "model"))
        real_train = realistic_set(Path(demo_train), work / "real", records, seconds)
        sets = (
            ("demo", "demo videos (32x32)", demo_train),
            ("sources", f"{seconds:g} s 640x360 sources", real_train),
        )
        for key, name, train in sets:
            cache = str(work / f"cache_{key}")
            cached_cfg = run_config(train, model, cache, "cache_only", steps, work / key, args.smoke)
            build_cache(cached_cfg)
            cached, cached_data = step_times(cached_cfg, steps)
            decoded, decoded_data = step_times(
                run_config(train, model, cache, "decode_only", steps, work / key, args.smoke), steps
            )
            results[f"decode_vs_cache_{key}"] = round(decoded / cached, 2)
            results[f"step_s_cached_{key}"] = round(cached, 3)
            results[f"step_s_decoded_{key}"] = round(decoded, 3)
            print(
                f"{name}: step {decoded:.3f} s on the fly (data {decoded_data:.3f} s) vs {cached:.3f} s cached "
                f"(data {cached_data:.3f} s) -> {decoded / cached:.2f}x"
            )
    print(json.dumps(results))


if __name__ == "__main__":
    main()
