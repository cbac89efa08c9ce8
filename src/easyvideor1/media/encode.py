"""Write frames to a video file with PyAV (synthetic data, test fixtures, benchmarks)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from fractions import Fraction

import av
import numpy as np

# codec name -> (PyAV encoder, pixel format, container extension)
CODECS = {
    "h264": ("libx264", "yuv420p", ".mp4"),
    "hevc": ("libx265", "yuv420p", ".mp4"),
    "vp9": ("libvpx-vp9", "yuv420p", ".webm"),
    "vp8": ("libvpx", "yuv420p", ".webm"),
    "mpeg4": ("mpeg4", "yuv420p", ".avi"),
    "mjpeg": ("mjpeg", "yuvj420p", ".avi"),
}


def encode_video(
    path: str,
    frames: Iterable[np.ndarray],
    fps: float | Fraction,
    codec: str = "h264",
    gop: int | None = None,
    bframes: int | None = None,
    rotation: int = 0,
    crf: int = 23,
) -> str:
    """Encode uint8 RGB ``[H, W, 3]`` frames. Odd sizes are fine for codecs that allow them.

    ``fps`` may be a Fraction (e.g. ``Fraction(24000, 1001)`` for 23.976). ``rotation`` writes a
    display-matrix rotation (degrees counter-clockwise) like phone cameras do.
    """
    encoder, pix_fmt, _ = CODECS[codec]
    rate = Fraction(fps).limit_denominator(1001) if not isinstance(fps, Fraction) else fps
    tmp = f"{path}.part"
    it = iter(frames)
    first = next(it)
    h, w = first.shape[:2]
    with av.open(tmp, "w", format=_container_format(path)) as out:
        stream = out.add_stream(encoder, rate=rate)
        if (h % 2 or w % 2) and encoder in ("libx264", "libx265"):
            pix_fmt = "yuv444p"  # x264/x265 reject odd sizes with 4:2:0 chroma subsampling
        stream.width, stream.height, stream.pix_fmt = w, h, pix_fmt
        options: dict[str, str] = {}
        if encoder in ("libx264", "libx265"):
            options.update(preset="ultrafast", crf=str(crf))
            if encoder == "libx265":
                options["x265-params"] = "log-level=error"
        if encoder.startswith("libvpx"):
            options.update(deadline="realtime", **{"cpu-used": "8"})
        stream.options = options
        if gop is not None:
            stream.codec_context.gop_size = gop
        if bframes is not None and encoder != "mjpeg":
            stream.codec_context.max_b_frames = bframes
        if rotation:
            stream.set_display_rotation(rotation)
        for frame in _chain(first, it):
            vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
            for packet in stream.encode(vf):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    os.replace(tmp, path)
    return path


def _chain(first, rest):
    yield first
    yield from rest


def _container_format(path: str) -> str:
    ext = os.path.splitext(path)[1].lower()
    return {".mp4": "mp4", ".webm": "webm", ".avi": "avi", ".mkv": "matroska", ".mov": "mov"}.get(ext, "mp4")
