"""Frames resized as they are decoded (issue 11 item 6): same pixels as the stacked path, less memory.

The stacked path is what the project (and qwen-vl-utils) did before: decode every wanted frame at
source size, stack, resize the stack with torch's bicubic antialiased uint8 resize. It is rebuilt
here from ``read_frames`` without a transform plus ``resize_frames``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import av
import numpy as np
import pytest

from easyvideor1.media import resize as R
from easyvideor1.media.decode import probe_video, read_frames
from easyvideor1.media.encode import encode_video
from easyvideor1.media.resize import FrameResizer
from easyvideor1.media.sampling import SamplingParams, video_frame_size
from easyvideor1.media.video import resize_frames, sample_video
from tests.conftest import gradient_frames

ROOT = Path(__file__).resolve().parents[2]


def _encode(path: str, encoder: str, pix_fmt: str, n: int, height: int, width: int, fps: int = 10) -> str:
    with av.open(path, "w") as out:
        s = out.add_stream(encoder, rate=fps)
        s.width, s.height, s.pix_fmt = width, height, pix_fmt
        if encoder == "libx264":
            s.options = {"preset": "ultrafast"}
        for img in gradient_frames(n, height, width):
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
    return path


# (name, encoder, pixel format, height, width): the planar formats real files use, odd sizes too
SOURCES = [
    ("h264_420", "libx264", "yuv420p", 360, 640),
    ("h264_444_odd", "libx264", "yuv444p", 301, 517),
    ("h264_422", "libx264", "yuv422p", 240, 424),
    ("mjpeg_420", "mjpeg", "yuvj420p", 480, 720),
    ("mjpeg_422", "mjpeg", "yuvj422p", 270, 500),
]
# downscale by the pixel budget, and upscale by a large min_pixels
PARAMS = {
    "down": dict(nframes=4, max_pixels=64 * 32 * 32, min_pixels=16 * 32 * 32),
    "up": dict(nframes=4, min_pixels=700 * 32 * 32, max_pixels=760 * 32 * 32),
}


def _stacked(path: str, params: SamplingParams, indices: list[int]) -> np.ndarray:
    info = probe_video(path)
    raw = read_frames(info, indices)  # every wanted frame at source size
    h, w = video_frame_size(params, raw.shape[1], raw.shape[2], len(indices))
    return resize_frames(raw, h, w).numpy()


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("resize")
    out = {name: _encode(str(d / f"{name}.mkv"), enc, fmt, 8, h, w) for name, enc, fmt, h, w in SOURCES}
    frames = list(gradient_frames(8, 48, 80))
    out["rotated_90"] = encode_video(str(d / "rot.mp4"), frames, 10, rotation=90)
    return out


@pytest.mark.parametrize("which", list(PARAMS))
def test_per_frame_resize_gives_the_pixels_of_the_stacked_path(sources, which):
    for name, path in sources.items():
        params = SamplingParams(factor=32, **PARAMS[which])
        video = sample_video(path, params)
        expected = _stacked(path, params, video.meta["frame_indices"])
        assert video.frames.shape == expected.shape, name
        assert np.array_equal(video.frames.numpy(), expected), f"{name}: pixels differ from the stacked path"


@pytest.mark.parametrize("which", list(PARAMS))
def test_strip_conversion_gives_the_pixels_of_the_stacked_path(sources, which, monkeypatch):
    calls = []
    strip_resize = R._strip_resize

    def counting(frame, height, width):
        calls.append((frame.height, frame.width))
        return strip_resize(frame, height, width)

    monkeypatch.setattr(R, "STRIP_MIN_PIXELS", 0)  # every frame takes the strip path where it can
    monkeypatch.setattr(R, "_strip_resize", counting)
    for name, path in sources.items():
        params = SamplingParams(factor=32, **PARAMS[which])
        calls.clear()
        video = sample_video(path, params)
        expected = _stacked(path, params, video.meta["frame_indices"])
        assert np.array_equal(video.frames.numpy(), expected), f"{name}: strip path pixels differ"
        source = (video.meta["source_height"], video.meta["source_width"])  # (not the self-check's)
        assert calls.count(source) == (0 if name == "rotated_90" else 4), name  # rotated: plain path


def test_batches_of_any_size_give_the_same_pixels(sources):
    path = sources["h264_420"]  # 360x640: one RGB frame is 691,200 bytes
    params = SamplingParams(factor=32, **PARAMS["down"])
    indices = [0, 1, 2, 2, 4, 5, 6, 7]  # a repeated index too
    expected = _stacked(path, params, indices)
    info = probe_video(path)
    for budget in (1, 3 * 640 * 360 * 3, 10**9):  # every frame alone, batches of 3, all at once
        resizer = FrameResizer(lambda h, w: video_frame_size(params, h, w, len(indices)), batch_bytes=budget)
        assert np.array_equal(read_frames(info, indices, collector=resizer), expected), budget


def test_the_strip_check_refuses_conversions_that_are_not_row_local():
    assert R._strips_are_exact("yuv420p", 1, 1) and R._strips_are_exact("yuvj420p", 2, 2)
    assert not R._strips_are_exact("nv12", 2, 1)  # semi-planar: differs at strip edges
    assert not R._strips_are_exact("rgb24", 2, 1)


_MEASURE = textwrap.dedent(
    """
    import json, resource, sys
    from easyvideor1.media.decode import set_decode_threads
    from easyvideor1.media.sampling import SamplingParams
    from easyvideor1.media.video import sample_video
    set_decode_threads(1)  # as in a preprocess worker
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    video = sample_video(sys.argv[1], SamplingParams(factor=32))
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    print(json.dumps({"grown_mb": grown, "shape": list(video.frames.shape)}))
    """
)


def test_peak_memory_follows_the_output_not_the_source(tmp_path):
    """A 4608x4608 MJPEG (one RGB frame is 64 MB): the stacked path grows by > 8 such frames."""
    size = 4608
    path = str(tmp_path / "huge.avi")
    with av.open(path, "w") as out:
        s = out.add_stream("mjpeg", rate=2)
        s.width, s.height, s.pix_fmt = size, size, "yuvj420p"
        ramp = np.linspace(0, 255, size, dtype=np.float32).astype(np.uint8)
        img = np.empty((size, size, 3), np.uint8)
        img[..., 0], img[..., 1], img[..., 2] = ramp[None, :], ramp[:, None], 128
        for i in range(4):
            img[:64, i * 64 : (i + 1) * 64] = 255
            for p in s.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-c", _MEASURE, path], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    rgb_frame_mb = size * size * 3 / 2**20
    assert result["shape"][0] == 4 and result["shape"][1] < 1000
    assert result["grown_mb"] < 2.5 * rgb_frame_mb, result  # the stacked path: ~8.5 frames
