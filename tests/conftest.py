"""Shared fixtures: real videos encoded with PyAV on the fly (nothing is downloaded)."""

from __future__ import annotations

import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from easyvideor1.media.encode import CODECS, encode_video


def _find_shared() -> Path:
    """The project's read-only reference folder: $EASYVIDEOR1_SHARED, else ../shared from the checkout."""
    env = os.environ.get("EASYVIDEOR1_SHARED")
    candidates = [Path(env)] if env else []
    candidates += [Path(__file__).resolve().parents[2] / "shared", Path("/work/shared")]
    return next((c for c in candidates if c.is_dir()), candidates[0])


SHARED = _find_shared()

# vLLM's CPU engine compiles its model with inductor and warms it up at every start (about 20 s of a
# 2-core machine per engine, 30 s before its compile cache is filled); the switch vLLM's own CPU CI
# uses traces the same graph once and runs it with dynamo's eager backend, without the warm-up
# (5 s). Every process a test starts inherits it; test_vllm_training keeps one run on inductor.
os.environ.setdefault("VLLM_CPU_CI_ENV", "1")
ANNOTATIONS = SHARED / "benchmarks" / "annotations"


def gradient_frames(n: int, height: int, width: int, seed: int = 0):
    """Frames whose content identifies the frame: a bar whose position encodes the index."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 60, size=(height, width, 3), dtype=np.uint8)
    for i in range(n):
        f = base.copy()
        x = int((width - 1) * (i / max(n - 1, 1)))
        f[:, max(0, x - 1) : x + 2] = (255, 255 - (i * 7) % 256, (i * 13) % 256)
        yield f


def make_video(
    directory: Path | str,
    name: str,
    *,
    fps: float | Fraction = 30,
    duration: float = 1.0,
    size: tuple[int, int] = (64, 48),
    codec: str = "h264",
    gop: int | None = None,
    bframes: int | None = None,
    rotation: int = 0,
) -> str:
    """Encode a test video; ``size`` is (width, height). Returns its path."""
    w, h = size
    rate = Fraction(fps).limit_denominator(1001)
    n = max(2, round(duration * float(rate)))
    path = os.path.join(str(directory), name + CODECS[codec][2])
    encode_video(
        path, gradient_frames(n, h, w), rate, codec=codec, gop=gop, bframes=bframes, rotation=rotation
    )
    return path


@pytest.fixture(scope="session")
def video_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("videos")


@pytest.fixture(scope="session")
def small_video(video_dir) -> str:
    return make_video(video_dir, "small", fps=30, duration=3.0, size=(96, 64), gop=30)


def write_modality_records(
    d: Path, frames: int, seed: int, options: tuple[str, str] = ("A. r", "B. b")
) -> str:
    """One prompt of each kind in ``d/kinds.jsonl``: a video, an image, text only, and video + image
    (prompts of different lengths, for modality and packing tests)."""
    import json

    from PIL import Image

    rng = np.random.default_rng(seed)
    video = [rng.integers(0, 255, (32, 32, 3), dtype=np.uint8) for _ in range(frames)]
    encode_video(str(d / "v.mp4"), video, 4)
    Image.fromarray(video[0]).save(d / "i.png")
    base = {
        "problem": "What colour?",
        "problem_type": "multiple choice",
        "answer": "A",
        "options": list(options),
    }
    rows = [
        {**base, "problem_id": "video", "videos": ["v.mp4"]},
        {**base, "problem_id": "image", "images": ["i.png"]},
        {**base, "problem_id": "text"},
        {**base, "problem_id": "mixed", "videos": ["v.mp4"], "images": ["i.png"]},
    ]
    path = d / "kinds.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


@pytest.fixture(scope="module")
def one_thread():
    """One intra-op thread: tiny models gain nothing from more, and on a shared machine idle
    threads spinning for a busy core cost far more than the work (restored afterwards)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def pytest_configure(config):
    """Keep the order set below under ``--dist loadfile``: xdist otherwise re-sorts the files by
    their number of tests, which sends the slow files (a few long tests each) out last."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    """Files with slow tests first (stable: the rest keep their order, each file its own).

    `make test` hands whole files to two workers in collection order; the slow files (torchrun,
    vLLM and whole training runs) sit mostly in tests/trainer/, collected last, so one worker used
    to finish them alone while the other idled. Longest first leaves short files to fill the gaps.
    """
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


def run_cli(*args: str, cwd: Path | str | None = None, threads: int = 1, timeout: int = 600):
    """``python -m easyvideor1 ARGS`` in a subprocess (``threads`` intra-op threads), its output kept."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="false")
    return subprocess.run(
        [sys.executable, "-m", "easyvideor1", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def one_line_error(r, *fragments, code=2):
    """The CLI's user-error form: exit ``code``, one line on stderr holding ``fragments``, no traceback."""
    lines = r.stderr.strip().splitlines()
    assert r.returncode == code and len(lines) == 1, (r.returncode, r.stderr[-1500:])
    assert "Traceback" not in r.stderr and all(f in lines[0] for f in fragments), (fragments, lines)


def hold_in_subprocess(out, command: str) -> subprocess.Popen:
    """A process holding ``out`` as a run would (easyvideor1.outdir.hold), until killed."""
    code = (
        "import sys, time; from easyvideor1.outdir import hold\n"
        "with hold(sys.argv[1], '--out', sys.argv[2]):\n"
        "    print('held', flush=True); time.sleep(600)\n"
    )
    p = subprocess.Popen([sys.executable, "-c", code, str(out), command], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    return p


# A video whose frames say which frame they are (tool tests): 6 s, 160x96 at 10 fps, frame i's right
# half is grey level 20 + 3 i, its left half red (so crops can be told apart).
COUNTING_FPS, COUNTING_SECONDS = 10, 6


@pytest.fixture(scope="session")
def counting_video(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("counting") / "counting.mp4")
    frames = []
    for i in range(COUNTING_FPS * COUNTING_SECONDS):
        f = np.full((96, 160, 3), 20 + 3 * i, dtype=np.uint8)
        f[:, :80, 0] = 255
        frames.append(f)
    encode_video(path, frames, COUNTING_FPS, gop=10)
    return path
