"""Decoded frame -> output-size RGB, one frame at a time, with the pixels of the stacked path.

qwen-vl-utils converts every sampled frame to RGB at source size, stacks them and resizes the stack
(bicubic, antialiased). Resizing each frame on its own with the same torch op gives the same pixels
(the op works image by image) and keeps only one source-size frame alive. For very large frames
(an 8000x8000 source is 192 MB as RGB, next to ~300 MB of torch in every worker) even that one RGB
frame is too much, so such frames are converted and resized in horizontal strips:

1. the antialiased resize is separable: torch resizes along the width, then along the height, with
   a uint8 intermediate. Resizing each strip of rows to the output width, then the stacked strips
   to the output height, is the same computation;
2. FFmpeg's YUV -> RGB conversion of planar 8-bit YUV (``rgb.to_rgb24``: the unscaled path) is local
   to rows (strip starts are kept even for 4:2:0 chroma), so converting strips equals converting the
   frame.

Both facts depend on the installed torch and FFmpeg, so both are checked once per process on a
small synthetic frame (per pixel format and colour properties) before the strip path is used; if
either check fails, the frame takes the plain path. ``tests/media/test_resize.py`` compares the
strip path with the plain path on real decoded frames.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import av
import numpy as np

from .rgb import to_rgb24

if TYPE_CHECKING:  # torch is imported where frames are resized: run configs import this module
    import torch

# Frames at least this large (pixels) are converted in strips; smaller ones take the plain path.
STRIP_MIN_PIXELS = 4096 * 4096
_STRIP_ROWS = 256  # rows per strip: even (4:2:0 chroma pairs), ~6 MB of RGB at 8000 wide
# Planar 8-bit formats whose RGB conversion is row-local (semi-planar NV12 and high bit depths are
# not: measured, they differ at strip edges).
_STRIP_FORMATS = ("yuv420p", "yuvj420p", "yuv422p", "yuvj422p", "yuv444p", "yuvj444p", "gray")


def resize_frames(frames: np.ndarray | torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Bicubic, antialiased resize of uint8 ``[T, H, W, 3]`` frames, staying in uint8.

    Same filter as qwen-vl-utils (bicubic + antialias); torch's uint8 kernel is ~15x faster than
    resizing in float32 and differs from it by rounding only.
    """
    import torch

    t = torch.from_numpy(frames) if isinstance(frames, np.ndarray) else frames
    if t.shape[1] == height and t.shape[2] == width:
        return t.contiguous()
    x = t.permute(0, 3, 1, 2)
    out = torch.nn.functional.interpolate(x, size=(height, width), mode="bicubic", antialias=True)
    return out.permute(0, 2, 3, 1).contiguous()


def frame_to_rgb(frame: av.VideoFrame) -> np.ndarray:
    """uint8 ``[H, W, 3]`` RGB with the display rotation applied (portrait phone video upright)."""
    img = to_rgb24(frame)
    k = _quarter_turns(frame)
    return np.ascontiguousarray(np.rot90(img, k)) if k else img


def _quarter_turns(frame: av.VideoFrame) -> int:
    return (int(round(frame.rotation or 0)) // 90) % 4


def _copy_rows(frame: av.VideoFrame, r0: int, r1: int) -> av.VideoFrame:
    """Rows ``[r0, r1)`` of a planar frame as a new frame with the same colour properties."""
    strip = av.VideoFrame(frame.width, r1 - r0, frame.format.name)
    strip.colorspace, strip.color_range = frame.colorspace, frame.color_range
    for src, dst in zip(frame.planes, strip.planes, strict=True):
        a = np.frombuffer(src, np.uint8).reshape(src.height, src.line_size)
        b = np.frombuffer(dst, np.uint8).reshape(dst.height, dst.line_size)
        first = r0 * src.height // frame.height  # r0 / 2 for 4:2:0 chroma (r0 is even)
        b[:, : dst.width] = a[first : first + dst.height, : dst.width]
    return strip


def _strip_resize(frame: av.VideoFrame, height: int, width: int) -> np.ndarray:
    """The frame's RGB, resized to (height, width), without ever holding it at source size."""
    rows = np.empty((frame.height, width, 3), np.uint8)  # source height, output width
    for r0 in range(0, frame.height, _STRIP_ROWS):
        r1 = min(frame.height, r0 + _STRIP_ROWS)
        rgb = to_rgb24(_copy_rows(frame, r0, r1))
        rows[r0:r1] = resize_frames(rgb[None], r1 - r0, width)[0].numpy()  # along the width only
    return resize_frames(rows[None], height, width)[0].numpy()  # along the height only


@functools.cache
def _strips_are_exact(pix_fmt: str, colorspace: int, color_range: int) -> bool:
    """Whether the strip path reproduces the plain path here (this torch, this FFmpeg)."""
    if pix_fmt not in _STRIP_FORMATS:
        return False
    rng = np.random.default_rng(0)
    h, w = 2 * _STRIP_ROWS + 38, 202  # odd strip remainder and a width off every SIMD multiple
    img = np.cumsum(rng.integers(0, 96, (h, w, 3)), axis=1).astype(np.uint8)
    frame = av.VideoFrame.from_ndarray(img, format="rgb24").reformat(format=pix_fmt)
    frame.colorspace, frame.color_range = colorspace, color_range
    whole = to_rgb24(frame)
    for out_h, out_w in ((h // 3, w // 2), (h + 6, w + 10), (h, w // 2), (h // 2, w)):
        plain = resize_frames(whole[None], out_h, out_w)[0].numpy()
        if not np.array_equal(_strip_resize(frame, out_h, out_w), plain):
            return False
    return True


class FrameCollector:
    """Decoded frames by index, kept as uint8 RGB at source size (what ``read_frames`` returns)."""

    def __init__(self) -> None:
        self.frames: dict[int, np.ndarray] = {}

    def __contains__(self, index: int) -> bool:
        return index in self.frames

    def __len__(self) -> int:
        return len(self.frames)

    def add(self, index: int, frame: av.VideoFrame) -> None:
        self.frames[index] = frame_to_rgb(frame)

    def clear(self) -> None:
        self.frames.clear()

    def finish(self) -> dict[int, np.ndarray]:
        """Every frame added, as its final array."""
        return self.frames


class FrameResizer(FrameCollector):
    """Collects decoded frames resized to one output size, sized from the first frame added.

    ``size_for(height, width)`` gives the output size for the (rotated) source size; it is asked
    once, and every frame is resized to that size, as a stacked video would be. Source-size RGB
    frames wait in a batch of at most ``batch_bytes`` (one resize call per batch: per-frame calls
    are ~10x slower for small frames with several torch threads) and are resized when it is full;
    frames of ``STRIP_MIN_PIXELS`` or more are converted and resized in strips as they come.
    Memory: the output plus one batch, whatever the source resolution or the frame count.
    """

    def __init__(self, size_for: Callable[[int, int], tuple[int, int]], batch_bytes: int = 32 * 2**20):
        super().__init__()
        self.size_for, self.batch_bytes = size_for, batch_bytes
        self.source: tuple[int, int] | None = None  # (height, width) after display rotation
        self.output: tuple[int, int] | None = None
        self._pending: list[int] = []  # indices whose frame is still at source size

    def add(self, index: int, frame: av.VideoFrame) -> None:
        k = _quarter_turns(frame)
        if self.output is None:
            self.source = (frame.height, frame.width) if k % 2 == 0 else (frame.width, frame.height)
            self.output = self.size_for(*self.source)
        height, width = self.output
        if (
            k == 0
            and frame.width * frame.height >= STRIP_MIN_PIXELS
            and _strips_are_exact(frame.format.name, int(frame.colorspace), int(frame.color_range))
        ):
            self.frames[index] = _strip_resize(frame, height, width)
            return
        rgb = frame_to_rgb(frame)
        if rgb.shape[:2] != self.source:  # the stream changed size mid-way: this frame alone
            self.frames[index] = resize_frames(rgb[None], height, width)[0].numpy()
            return
        self.frames[index] = rgb
        self._pending.append(index)
        if len(self._pending) * rgb.nbytes >= self.batch_bytes:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        height, width = self.output
        batch = np.stack([self.frames[i] for i in self._pending])
        for i in self._pending:
            del self.frames[i]  # drop the source-size frames before resizing their copy
        out = resize_frames(batch, height, width).numpy()
        del batch
        for j, i in enumerate(self._pending):
            self.frames[i] = out[j]
        self._pending.clear()

    def clear(self) -> None:
        super().clear()
        self._pending.clear()

    def finish(self) -> dict[int, np.ndarray]:
        self._flush()
        return self.frames
