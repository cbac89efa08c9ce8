"""One video in, model-ready frames out: probe, pick frames, decode, resize.

This is the on-the-fly path. The offline cache (``cache.py``) stores exactly what
:func:`sample_video` returns, so training and evaluation see the same frames either way.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from .decode import DecodeError, probe_video, read_frames
from .sampling import SamplingParams, frame_indices, frame_range, video_frame_size

FORMAT_VERSION = 1  # bump when the stored frames or metadata change meaning


@dataclass
class SampledVideo:
    """Sampled, resized frames (uint8 ``[T, H, W, 3]``) and the metadata the processor needs."""

    frames: torch.Tensor
    meta: dict[str, Any]

    def processor_metadata(self) -> dict[str, Any]:
        """Keyword arguments for ``transformers.video_utils.VideoMetadata``.

        With ``do_sample_frames=False`` the Qwen3-VL processor computes each frame's timestamp as
        ``frames_indices[i] / fps``; passing the source fps and the real indices keeps the
        ``<t seconds>`` text right (without them it assumes 24 fps). Qwen2.5-VL derives
        ``second_per_grid_ts`` from ``len(frames_indices) / total_num_frames * fps``, so
        ``total_num_frames`` is the clip window's length, as qwen-vl-utils reports it.
        """
        m = self.meta
        return {
            "total_num_frames": int(m.get("window_frames", m["total_frames"])),
            "fps": float(m["source_fps"]),
            "frames_indices": list(m["frame_indices"]),
            "width": int(m["width"]),
            "height": int(m["height"]),
            "duration": float(m["total_frames"]) / float(m["source_fps"]),
            "video_backend": "pyav",
        }


def resize_frames(frames: np.ndarray | torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Bicubic, antialiased resize of uint8 ``[T, H, W, 3]`` frames, staying in uint8.

    Same filter as qwen-vl-utils (bicubic + antialias); torch's uint8 kernel is ~15x faster than
    resizing in float32 and differs from it by rounding only.
    """
    t = torch.from_numpy(frames) if isinstance(frames, np.ndarray) else frames
    if t.shape[1] == height and t.shape[2] == width:
        return t.contiguous()
    x = t.permute(0, 3, 1, 2)
    out = torch.nn.functional.interpolate(x, size=(height, width), mode="bicubic", antialias=True)
    return out.permute(0, 2, 3, 1).contiguous()


def source_stat(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def sample_video(path: str, params: SamplingParams, time_limit: float | None = None) -> SampledVideo:
    """Decode ``path`` into model frames following ``params`` (qwen-vl-utils 0.0.14 rules)."""
    path = os.path.abspath(path)
    t0 = time.monotonic()
    deadline = t0 + time_limit if time_limit else None
    size, mtime_ns = source_stat(path) if os.path.exists(path) else (0, 0)  # before reading: the frames
    info = probe_video(path, deadline=deadline)  # must never be paired with a newer file's stats
    try:
        indices, sample_fps = frame_indices(params, info.total_frames, info.fps)
        window_frames = frame_range(params, info.total_frames, info.fps)[2]
    except ValueError as e:
        raise DecodeError(f"{path}: {e}") from e
    raw = read_frames(info, indices, deadline=deadline)
    src_h, src_w = raw.shape[1], raw.shape[2]  # after display rotation
    try:
        height, width = video_frame_size(params, src_h, src_w, len(indices))
    except ValueError as e:
        raise DecodeError(f"{path}: {e}") from e
    frames = resize_frames(raw, height, width)
    meta = {
        "source_path": path,
        "source_size": size,
        "source_mtime_ns": mtime_ns,
        "source_fps": info.fps,
        "source_height": src_h,
        "source_width": src_w,
        "codec": info.codec,
        "total_frames": info.total_frames,
        "window_frames": window_frames,  # frames inside video_start/video_end (all when no window)
        "frame_indices": indices,
        "sample_fps": sample_fps,
        "height": height,
        "width": width,
        "params": params.to_dict(),
        "version": FORMAT_VERSION,
        "decode_seconds": round(time.monotonic() - t0, 4),
    }
    return SampledVideo(frames=frames, meta=meta)
