"""One video in, model-ready frames out: probe, pick frames, decode, resize.

This is the on-the-fly path. The offline cache (``cache.py``) stores exactly what
:func:`sample_video` returns, so training and evaluation see the same frames either way.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .decode import probe_video, read_frames
from .failures import CacheError, DecodeError
from .resize import FrameResizer, resize_frames  # noqa: F401  (resize_frames: re-exported)
from .sampling import SamplingParams, frame_indices, frame_range, video_frame_size

if TYPE_CHECKING:  # torch is imported where frames are made: run configs import this module
    import torch

# Bump when the stored frames or metadata change meaning. 2: edit lists honoured (frame 0 is the
# first shown frame), truncated files refused unless allowed, ``frame_times`` stored. 3: the video
# stream is the one ffmpeg picks (not cover art), and RGB is the ffmpeg command line's (other pixels
# for 10-bit and other non-8-bit-planar sources; 8-bit yuv420p/422p/444p frames are unchanged).
FORMAT_VERSION = 3

# How the model is told when each frame was shown (``data.timestamps``):
# index: frame index / average fps, as qwen-vl-utils and decord (exact for constant frame rate);
# pts: the frame's real presentation time (differs on variable-frame-rate files).
TIMESTAMP_MODES = ("index", "pts")


@dataclass
class SampledVideo:
    """Sampled, resized frames (uint8 ``[T, H, W, 3]``) and the metadata the processor needs.

    ``timestamps`` (one of :data:`TIMESTAMP_MODES`) is how :meth:`processor_metadata` reports the
    frames' times; the data pipeline sets it from ``data.timestamps`` when it loads the video.
    """

    frames: torch.Tensor
    meta: dict[str, Any]
    timestamps: str = "index"

    def processor_metadata(self, timestamps: str | None = None) -> dict[str, Any]:
        """Keyword arguments for ``transformers.video_utils.VideoMetadata``.

        With ``do_sample_frames=False`` the Qwen3-VL processor (and vLLM's) computes each frame's
        timestamp as ``frames_indices[i] / fps``; passing the source fps and the real indices keeps
        the ``<t seconds>`` text right (without them it assumes 24 fps). Qwen2.5-VL derives
        ``second_per_grid_ts`` from ``len(frames_indices) / total_num_frames * fps``, so
        ``total_num_frames`` is the clip window's length, as qwen-vl-utils reports it.

        With ``timestamps="pts"`` the indices become fractional positions ``t * fps`` chosen so
        that ``position / fps`` is exactly the frame's presentation time ``t``: Qwen3-VL then
        reads real times on variable-frame-rate video, while ``fps`` (and with it Qwen2.5-VL's
        per-video rate) stays the same.
        """
        m = self.meta
        mode = timestamps or self.timestamps
        if mode not in TIMESTAMP_MODES:
            raise ValueError(f"timestamps must be one of {', '.join(TIMESTAMP_MODES)}, got {mode!r}")
        fps = float(m["source_fps"])
        indices: list[int] | list[float] = list(m["frame_indices"])
        if mode == "pts":
            times = m.get("frame_times")
            if times is None or len(times) != len(indices):
                raise CacheError(
                    f"{m.get('source_path', 'video')}: no frame presentation times stored "
                    f"(entry format {m.get('version')}); rebuild it with `easyvideor1 preprocess`"
                )
            indices = [_position_for_time(float(t), fps) for t in times]
        return {
            "total_num_frames": int(m.get("window_frames", m["total_frames"])),
            "fps": fps,
            "frames_indices": indices,
            "width": int(m["width"]),
            "height": int(m["height"]),
            "duration": float(m["total_frames"]) / float(m["source_fps"]),
            "video_backend": "pyav",
        }


def _position_for_time(t: float, fps: float) -> float:
    """A float ``x`` with ``x / fps == t`` exactly, so the processor's division gives ``t`` back."""
    x = t * fps
    for _ in range(8):  # t * fps / fps is off by at most an ulp or two
        back = x / fps
        if back == t:
            return x
        x = math.nextafter(x, math.inf if back < t else -math.inf)
    return t * fps


def source_stat(path: str) -> tuple[int, int]:
    st = os.stat(path)
    return st.st_size, st.st_mtime_ns


def sample_video(path: str, params: SamplingParams, time_limit: float | None = None) -> SampledVideo:
    """Decode ``path`` into model frames following ``params`` (qwen-vl-utils 0.0.14 rules).

    Frames are resized as they are decoded, in batches of bounded size (the same bicubic
    antialiased resize gives the same pixels per frame as on the stacked video), so memory follows
    the output size, not the source resolution or the frame count.
    """
    path = os.path.abspath(path)
    t0 = time.monotonic()
    deadline = t0 + time_limit if time_limit else None
    # stat before reading: the frames must never be paired with a newer file's stats
    size, mtime_ns = source_stat(path) if os.path.exists(path) else (0, 0)
    info = probe_video(path, deadline=deadline, allow_truncated=params.allow_truncated)
    try:
        indices, sample_fps = frame_indices(params, info.total_frames, info.fps)
        window_frames = frame_range(params, info.total_frames, info.fps)[2]
    except ValueError as e:
        raise DecodeError(f"{path}: {e}") from e

    def size_for(height: int, width: int) -> tuple[int, int]:
        try:
            return video_frame_size(params, height, width, len(indices))
        except ValueError as e:
            raise DecodeError(f"{path}: {e}") from e

    import torch

    resizer = FrameResizer(size_for)
    frames = torch.from_numpy(read_frames(info, indices, deadline=deadline, collector=resizer))
    (src_h, src_w), (height, width) = resizer.source, resizer.output
    meta = {
        "source_path": path,
        "source_size": size,
        "source_mtime_ns": mtime_ns,
        "source_fps": info.fps,
        "source_height": src_h,
        "source_width": src_w,
        "codec": info.codec,
        "video_stream": info.stream,  # the container's stream index the frames come from
        "total_frames": info.total_frames,
        "window_frames": window_frames,  # frames inside video_start/video_end (all when no window)
        "frame_indices": indices,
        # presentation time of each sampled frame, seconds from the first shown frame (data.timestamps=pts)
        "frame_times": [info.frame_time(i) for i in indices],
        "truncated": info.truncated,  # why the file is shorter than declared ("" if it is not)
        "sample_fps": sample_fps,
        "height": height,
        "width": width,
        "params": params.to_dict(),
        "version": FORMAT_VERSION,
        "decode_seconds": round(time.monotonic() - t0, 4),
    }
    return SampledVideo(frames=frames, meta=meta)
