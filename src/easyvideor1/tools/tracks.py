"""The frames the video tools are served from: each tool reads a *track* of the record's video.

A track is an ordinary frame-cache entry (the qwen-vl-utils sampling rule at the track's fps and
pixel cap), so what a tool returns is fixed by the video and the settings, whether the track was
cached by ``preprocess`` or not:

* the seek track (``tools.seek_fps``, ``tools.seek_max_pixels``): dense, small frames;
* the detail track (``tools.detail_fps``, ``tools.detail_max_pixels``): sparse, large frames.

A cached track is read whole once per :class:`~.session.ToolSession`; a track not in the cache is
not decoded whole: only the frames a call picks are decoded from the source, at the size the whole
track would have.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from ..media.cache import VideoLoader, entry_matches, read_entry
from ..media.decode import probe_video, read_frames
from ..media.failures import CacheError
from ..media.resize import FrameResizer
from ..media.sampling import SamplingParams, frame_indices, video_frame_size
from ..media.video import FORMAT_VERSION, SampledVideo, source_stat
from ..models.families import get_family
from .config import ToolsConfig

# A track samples every frame up to this many (qwen-vl-utils would stop at 768 frames); its pixel
# budget is per frame (the usual per-video total would shrink a long video's track).
_TRACK_MAX_FRAMES = 1_000_000


def track_params(settings: ToolsConfig, kind: str, model_family: str) -> SamplingParams:
    """The sampling parameters of the ``seek`` or ``detail`` track (the cache key ``preprocess``
    writes its entries under)."""
    fps, cap = (
        (settings.seek_fps, settings.seek_max_pixels)
        if kind == "seek"
        else (settings.detail_fps, settings.detail_max_pixels)
    )
    factor = get_family(model_family).frames.factor
    return SamplingParams(
        factor=factor,
        fps=fps,
        max_frames=_TRACK_MAX_FRAMES,
        min_pixels=min(cap, 4 * factor * factor),
        max_pixels=cap,
        total_pixels=cap * _TRACK_MAX_FRAMES,
    )


@dataclass
class Track:
    """One track of one video: the source frame index and time of each track frame, and the
    frames when the cache had them (else they are decoded per call)."""

    indices: list[int]
    fps: float
    duration: float  # of the whole video, seconds
    size: tuple[int, int]  # (height, width) of every track frame
    frames: Any = None  # uint8 [T, H, W, 3] when read from the cache

    def time(self, position: int) -> float:
        return self.indices[position] / self.fps


class VideoSource:
    """One video of a record as the tools see it: its duration and its tracks (read or decoded)."""

    def __init__(self, path: str, settings: ToolsConfig, model_family: str, loader: VideoLoader | None):
        self.path, self.settings, self.family = path, settings, model_family
        self.loader = loader
        self._info = None
        self._tracks: dict[str, Track] = {}
        self._lock = threading.Lock()

    @property
    def info(self):
        if self._info is None:
            self._info = probe_video(self.path)
        return self._info

    @property
    def duration(self) -> float:
        """Seconds (from the seek track: a cached one answers without opening the source)."""
        return self.track("seek").duration

    def track(self, kind: str) -> Track:
        with self._lock:
            if kind not in self._tracks:
                self._tracks[kind] = self._load_track(kind)
            return self._tracks[kind]

    def _load_track(self, kind: str) -> Track:
        params = track_params(self.settings, kind, self.family)
        entry = self.loader.locate(self.path, params) if self.loader is not None else None
        video = None
        if entry is not None:
            try:
                video = read_entry(entry)
            except CacheError:  # a corrupt entry: refused in cache_only mode, else a miss (decoded below)
                if self.loader.mode == "cache_only":
                    raise
        if video is not None:
            meta = video.meta
            if entry_matches(meta, self.path, params) is None:
                self.loader.stats.hits += 1
                fps = float(meta["source_fps"])
                size = (int(meta["height"]), int(meta["width"]))
                return Track(list(meta["frame_indices"]), fps, meta["total_frames"] / fps, size, video.frames)
        if self.loader is not None:
            if self.loader.mode == "cache_only":  # as for the first view: no decoding at all
                raise CacheError(
                    f"{self.path}: no {kind} track in the frame cache (cache_only mode; run `easyvideor1 "
                    "preprocess` with the same tools.* settings)"
                )
            self.loader.stats.decoded += 1  # the frames a call picks are decoded from the source
        info = self.info
        indices, _ = frame_indices(params, info.total_frames, info.fps)
        size = video_frame_size(params, info.height, info.width, len(indices))
        return Track(indices, info.fps, info.duration, size)

    def frames(self, kind: str, positions: list[int]):
        """uint8 ``[k, H, W, 3]`` of the track frames at ``positions`` (sorted)."""
        import torch

        track = self.track(kind)
        if track.frames is not None:
            return track.frames[positions]
        wanted = [track.indices[p] for p in positions]
        deadline = time.monotonic() + self.settings.timeout_s  # a call's decode never outlives it
        collector = FrameResizer(lambda h, w: track.size)
        return torch.from_numpy(read_frames(self.info, wanted, deadline=deadline, collector=collector))

    def clip(self, kind: str, positions: list[int]) -> SampledVideo:
        """The track frames at ``positions`` as a clip with the metadata the processor reads."""
        track = self.track(kind)
        frames = self.frames(kind, positions)
        indices = [track.indices[p] for p in positions]
        size, mtime = source_stat(self.path) if os.path.exists(self.path) else (0, 0)
        meta = {
            "source_path": self.path,
            "source_size": size,
            "source_mtime_ns": mtime,
            "source_fps": track.fps,
            "total_frames": indices[-1] + 1,
            "window_frames": indices[-1] - indices[0] + 1,
            "frame_indices": indices,
            "frame_times": [i / track.fps for i in indices],
            "height": int(frames.shape[1]),
            "width": int(frames.shape[2]),
            "version": FORMAT_VERSION,
        }
        return SampledVideo(frames=frames, meta=meta)
