"""Peak memory of decoding a huge-resolution video: per-frame resize vs the stacked path.

An 8000x8000 MJPEG file of a few frames is only a few MB on disk, but each decoded RGB frame is
192 MB. The old path kept every sampled frame at source size plus a stacked copy (issue 11: 3.1 GB
in one worker); the current path resizes each frame as it is decoded. Measured, each in a fresh
process so the numbers do not mix:

- ``before``: the old algorithm (decode all wanted frames at source size, stack, resize the stack),
  rebuilt here from the same decoder (``read_frames`` without a transform + ``resize_frames``);
- ``after``: the real ``easyvideor1 preprocess`` command on a one-record data file (1 worker);
- ``baseline``: a process that only imports the same modules (Python + torch + PyAV).

Peak RSS is ``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` after each child exits (the largest
of the child and the workers it waited for). Prints one JSON line; exits 1 if ``after`` exceeds
``--limit-mb`` (default 600).

Usage: python benchmarks/decode_memory.py [--size 8000] [--frames 6] [--limit-mb 600] [--smoke]
(``--smoke``: a 1024x1024 source of 3 frames, the same keys)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

_BEFORE = textwrap.dedent(
    """
    import sys
    from easyvideor1.media.decode import probe_video, read_frames
    from easyvideor1.media.sampling import SamplingParams, frame_indices, video_frame_size
    from easyvideor1.media.video import resize_frames
    path = sys.argv[1]
    params = SamplingParams(factor=32)
    info = probe_video(path)
    indices, _ = frame_indices(params, info.total_frames, info.fps)
    raw = read_frames(info, indices)  # every wanted frame at source size, stacked
    h, w = video_frame_size(params, raw.shape[1], raw.shape[2], len(indices))
    out = resize_frames(raw, h, w)
    print(tuple(out.shape))
    """
)

_BASELINE = "import torch, av, easyvideor1.media.video, easyvideor1.data.preprocess"


def make_source(path: Path, size: int, frames: int, fps: int = 2) -> None:
    """A smooth gradient with a moving block: compresses to a few MB as MJPEG at any size."""
    import av

    y = np.linspace(0, 255, size, dtype=np.float32)[:, None]
    x = np.linspace(0, 255, size, dtype=np.float32)[None, :]
    base = np.empty((size, size, 3), np.uint8)
    base[..., 0] = ((x + y) / 2).astype(np.uint8)
    base[..., 1] = x.astype(np.uint8)
    base[..., 2] = y.astype(np.uint8)
    tmp = path.with_suffix(".part")
    with av.open(str(tmp), "w", format="avi") as out:
        stream = out.add_stream("mjpeg", rate=fps)
        stream.width, stream.height, stream.pix_fmt = size, size, "yuvj420p"
        for i in range(frames):
            img = base.copy()
            s = size // 8
            img[s * i % (size - s) :][:s, :s] = 255
            for packet in stream.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                out.mux(packet)
            del img
        for packet in stream.encode():
            out.mux(packet)
    os.replace(tmp, path)


def run_child(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """(peak RSS of the child and its waited-for workers in MB, wall seconds).

    ``ru_maxrss`` of RUSAGE_CHILDREN is a maximum over all children so far, so each measurement
    runs in its own intermediate process that reports just its own children's figure.
    """
    probe = textwrap.dedent(
        """
        import json, resource, subprocess, sys, time
        t0 = time.monotonic()
        proc = subprocess.run(json.loads(sys.argv[1]), capture_output=True, text=True)
        if proc.returncode:
            sys.exit(proc.stdout[-2000:] + proc.stderr[-2000:])
        rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        print(json.dumps({"rss_mb": rss, "seconds": time.monotonic() - t0}))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(cmd)], capture_output=True, text=True, cwd=cwd, env=env
    )
    if out.returncode:
        raise SystemExit(f"{cmd[:4]} failed: {out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result["rss_mb"], result["seconds"]


# the JSON line's keys, full and --smoke (tests/benchmarks/test_smoke.py checks them)
RESULT_KEYS = (
    "benchmark",
    "source",
    "baseline_rss_mb",
    "before_stacked_rss_mb",
    "after_preprocess_rss_mb",
    "limit_mb",
    "preprocess_seconds",
    "make_source_seconds",
    "built",
    "failed",
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--size", type=int, default=None, help="frame width and height (default 8000; smoke 1024)"
    )
    ap.add_argument("--frames", type=int, default=None, help="frames in the source file (default 6; smoke 3)")
    ap.add_argument(
        "--smoke", action="store_true", help="tiny sizes (seconds): checks it runs, not its figures"
    )
    ap.add_argument("--limit-mb", type=float, default=600.0, help="fail if preprocess peaks above this")
    ap.add_argument("--skip-before", action="store_true", help="do not measure the old stacked path")
    args = ap.parse_args()
    args.size = args.size or (1024 if args.smoke else 8000)
    args.frames = args.frames or (3 if args.smoke else 6)
    with tempfile.TemporaryDirectory(prefix="decode_memory_") as tmp:
        d = Path(tmp)
        video = d / "huge.avi"
        t0 = time.monotonic()
        make_source(video, args.size, args.frames)
        make_s = time.monotonic() - t0
        (d / "data.jsonl").write_text(
            json.dumps({"problem": "q", "answer": "a", "videos": [str(video)]}) + "\n"
        )
        py = sys.executable
        baseline, _ = run_child([py, "-c", _BASELINE], d)
        before = None if args.skip_before else run_child([py, "-c", _BEFORE, str(video)], d)[0]
        after, after_s = run_child(
            [py, "-m", "easyvideor1", "preprocess", "--data", str(d / "data.jsonl"), "--cache-dir",
             str(d / "cache"), "--model-family", "qwen3_vl", "--workers", "1", "--strict", "--quiet"],
            d,
        )  # fmt: skip
        report = json.loads((d / "cache" / "report.json").read_text())
        result = {
            "benchmark": "decode_memory",
            "source": f"{args.size}x{args.size} MJPEG, {args.frames} frames, "
            f"{video.stat().st_size / 1e6:.1f} MB on disk",
            "baseline_rss_mb": round(baseline),
            "before_stacked_rss_mb": None if before is None else round(before),
            "after_preprocess_rss_mb": round(after),
            "limit_mb": args.limit_mb,
            "preprocess_seconds": round(after_s, 2),
            "make_source_seconds": round(make_s, 2),
            "built": report.get("built"),
            "failed": report.get("failed"),
        }
        print(json.dumps(result))
        if after > args.limit_mb or report.get("built") != 1:
            sys.exit(1)


if __name__ == "__main__":
    main()
