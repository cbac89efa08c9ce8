"""RL step time with the frame cache vs on-the-fly decoding, on the demo config (one run, ratios printed).

Two video sets, same trainer settings:
- the demo's own videos (32x32, 4 frames): decoding is nearly free, so the cache barely matters;
- realistic sources (10 s, 640x360, 30 fps) sampled to the same 4 tiny frames: decoding a real
  video dominates a tiny model's step, as it dominates a big model's rollout/log-prob phases in
  the reference's measurement (1.47x overall there).
Each variant runs a few RL steps after one warm-up step; the mean step time and its data-loading
share are reported.

``--profile realistic`` runs the realistic-profile training step instead (``step_profile.py``):
padded vs packed, fixed vs token-budget micro-batches, re-encoded vs reused vision features, all on
vs all off, with peak memory (issue 13 part 2). ``--profile all`` (the default) runs both.
Usage: python benchmarks/train_step.py [--steps N] [--profile cache|realistic|all]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from easyvideor1.config import RunConfig, load_config  # noqa: E402
from easyvideor1.data.preprocess import preprocess  # noqa: E402
from easyvideor1.data.synthetic import random_scene, render_frames, write_demo_set  # noqa: E402
from easyvideor1.demo import demo_config_path  # noqa: E402
from easyvideor1.media.encode import encode_video  # noqa: E402
from easyvideor1.models.tiny import make_tiny_model  # noqa: E402
from easyvideor1.trainer.loop import Trainer  # noqa: E402


def realistic_set(src: Path, out: Path, n: int) -> str:
    """The demo records, pointed at 10 s 640x360 videos instead of the 32x32 ones."""
    import random

    rows = [json.loads(line) for line in open(src)][:n]
    (out / "videos").mkdir(parents=True, exist_ok=True)
    for i, r in enumerate(rows):
        scene = random_scene(random.Random(i), 640, 360, 30.0, 10.0)
        path = out / "videos" / f"real_{i}.mp4"
        encode_video(str(path), render_frames(scene, i), 30.0)
        r["videos"] = [str(path)]
    data = out / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(data)


def step_times(train: str, model: str, cache: str, mode: str, steps: int, work: Path) -> tuple[float, float]:
    cfg: RunConfig = load_config(
        RunConfig,
        demo_config_path(),
        [
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
    t = Trainer(cfg)
    times, data = [], []
    for i in range(steps + 1):
        m = t.rl_step()
        if i:  # skip the warm-up step
            times.append(m["time/step"])
            data.append(m["time/data"])
    return statistics.mean(times), statistics.mean(data)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--profile", choices=("cache", "realistic", "all"), default="all")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="evr1-step-"))
    if args.profile in ("realistic", "all"):
        from step_profile import realistic_profile

        realistic_profile(work / "realistic", min(args.steps, 2))
        if args.profile == "realistic":
            return
    demo_train, _ = write_demo_set(str(work / "demo"), n_train=64, n_val=8)
    model = make_tiny_model(str(work / "model"))
    real_train = realistic_set(Path(demo_train), work / "real", 64)
    base = load_config(RunConfig, demo_config_path())
    results = {}
    for name, train in (("demo videos (32x32)", demo_train), ("realistic videos (10 s 640x360)", real_train)):
        cache = str(work / f"cache_{len(results)}")
        preprocess([train], base.data, cache, workers=2, progress=False)
        cached, cached_data = step_times(train, model, cache, "cache_only", args.steps, work)
        decoded, decoded_data = step_times(train, model, cache, "decode_only", args.steps, work)
        results[name] = decoded / cached
        print(
            f"{name}: step {decoded:.3f} s on the fly (data {decoded_data:.3f} s) vs {cached:.3f} s cached "
            f"(data {cached_data:.3f} s) -> {decoded / cached:.2f}x"
        )
    print(json.dumps({k: round(v, 2) for k, v in results.items()}))


if __name__ == "__main__":
    main()
