"""The built-in video tools (``seek``, ``frame_at``, ``zoom``) and the frames they are served from.

Each tool reads a *track* of the record's video: an ordinary frame-cache entry (the qwen-vl-utils
sampling rule at the track's fps and pixel cap), so what a tool returns is fixed by the video and
the settings, whether the track was cached by ``preprocess`` or not:

* the seek track (``tools.seek_fps``, ``tools.seek_max_pixels``): ``seek`` returns its frames
  inside a time window, spread evenly, as a clip whose metadata carries the source times;
* the detail track (``tools.detail_fps``, ``tools.detail_max_pixels``): ``frame_at`` returns its
  frame nearest a time, ``zoom`` a crop of it, each resized to the image budget.

A cached track is read once per :class:`ToolSession` (one training step, one evaluation job); a
track not in the cache is not decoded whole: only the frames a call picks are decoded from the
source, at the size the whole track would have. Calls with the same arguments on the same video
(the ``n`` episodes of one prompt ask alike) are answered once per session.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from ..media.cache import CacheError, VideoLoader, entry_matches, read_entry
from ..media.decode import probe_video, read_frames
from ..media.resize import FrameResizer, resize_frames
from ..media.sampling import (
    FRAME_FACTOR,
    SamplingParams,
    frame_indices,
    image_size,
    video_frame_size,
)
from ..media.video import FORMAT_VERSION, SampledVideo, source_stat
from ..models.families import get_family
from .base import ToolError, ToolResult, register_tool
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


def tool_tracks(settings: ToolsConfig, model_family: str) -> list[SamplingParams]:
    """The tracks the configured tools read, as the frame-cache parameters ``preprocess`` writes."""
    kinds = sorted({kind for spec in settings.specs() for kind in spec.tracks})
    return [track_params(settings, kind, model_family) for kind in kinds]


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
        if entry is not None:
            video = read_entry(entry)
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


@dataclass
class ToolContext:
    """What a tool function gets besides its arguments: the record's videos and the limits of this
    call (``max_frames``: what the per-call and the episode's remaining frame budgets allow)."""

    record: Any
    videos: list[VideoSource]
    settings: ToolsConfig
    max_frames: int

    @property
    def video(self) -> VideoSource:
        if not self.videos:
            raise ToolError("this sample has no video")
        return self.videos[0]


@dataclass
class ToolSession:
    """The configured tools, and the tracks and answers the episodes of one step or job share:
    each video's tracks are read once, and a call asked again with the same arguments is answered
    from memory."""

    settings: ToolsConfig
    model_family: str
    loader: VideoLoader | None = None
    max_sources: int = 64  # videos whose tracks and answers are kept; past it the memory starts afresh
    # the tools listed but not served: every call is answered with this error (a probe of what the
    # policy does without them, e.g. the tool demo's "tools disabled" accuracy); None serves them
    refuse: str | None = None
    _sources: dict[str, VideoSource] = field(default_factory=dict)
    _answers: dict[str, ToolResult] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    hits: int = 0

    def __post_init__(self) -> None:
        self.specs = self.settings.specs()  # an unknown tool name fails here, before any episode
        family = get_family(self.model_family)
        if self.specs and family.tokens.no_tools:
            raise ValueError(
                f"tools.names: {family.model_type} cannot run tool episodes ({family.tokens.no_tools}); "
                "use a Qwen-VL or Qwen3.5 model or drop tools.names"
            )

    def schemas(self) -> list[dict[str, Any]]:
        """The ``tools=`` list of the chat template."""
        return [s.schema() for s in self.specs]

    def episode(self, record: Any, video_paths: list[str]):
        """Fresh per-episode budgets over this session (an :class:`~.calls.EpisodeTools`)."""
        from .calls import EpisodeTools

        return EpisodeTools(self.specs, self, record, list(video_paths), self.settings, refuse=self.refuse)

    def clear(self) -> None:
        """Forget every track and answer (the trainer calls it at each step: answers are reused
        within a step, and a long run must not keep every video's frames)."""
        with self._lock:
            self._sources.clear()
            self._answers.clear()

    def context(self, record: Any, video_paths: list[str], max_frames: int) -> ToolContext:
        with self._lock:
            if len(self._sources) + len(video_paths) > self.max_sources:  # bounded memory on long jobs
                self._sources.clear()
                self._answers.clear()
            sources = [
                self._sources.setdefault(p, VideoSource(p, self.settings, self.model_family, self.loader))
                for p in video_paths
            ]
        return ToolContext(record, sources, self.settings, max_frames)

    def remembered(self, ctx: ToolContext, name: str, args: dict[str, Any]) -> tuple[str, ToolResult | None]:
        key = json.dumps([name, [v.path for v in ctx.videos], ctx.max_frames, args], sort_keys=True)
        with self._lock:
            found = self._answers.get(key)
            self.hits += found is not None
            return key, found

    def remember(self, key: str, result: ToolResult) -> None:
        with self._lock:
            self._answers[key] = result


# ------------------------------------------------------------------------------- the tools


def _time_in_video(ctx: ToolContext, t: float, what: str) -> float:
    duration = ctx.video.duration
    if not 0 <= t <= duration:
        raise ToolError(f"{what} {t:g} s is outside the video (0 to {duration:.2f} s)")
    return t


def _nearest(track: Track, t: float) -> int:
    return min(range(len(track.indices)), key=lambda p: (abs(track.time(p) - t), p))


def _image(frame, settings: ToolsConfig, factor: int):
    """A uint8 ``[H, W, 3]`` frame as a PIL image within the image budget (the factor grid)."""
    from PIL import Image

    h, w = int(frame.shape[0]), int(frame.shape[1])
    try:
        out_h, out_w = image_size(h, w, factor, settings.image_min_pixels, settings.image_max_pixels)
    except ValueError as e:  # e.g. an aspect ratio past 200:1
        raise ToolError(str(e)) from None
    return Image.fromarray(resize_frames(frame[None], out_h, out_w)[0].numpy())


@register_tool(
    "seek",
    description=(
        "Look again at a time window of the video: returns num_frames frames spread evenly from "
        "start_s to end_s (seconds), denser than the first view."
    ),
    parameters={
        "type": "object",
        "properties": {
            "start_s": {"type": "number", "description": "window start, seconds"},
            "end_s": {"type": "number", "description": "window end, seconds"},
            "num_frames": {"type": "integer", "description": "frames wanted (even; capped by the budget)"},
        },
        "required": ["start_s", "end_s"],
        "additionalProperties": False,
    },
    tracks=("seek",),
)
def seek(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    start = _time_in_video(ctx, float(args["start_s"]), "start_s")
    end = min(float(args["end_s"]), ctx.video.duration)
    if end <= start:
        raise ToolError(f"end_s ({args['end_s']:g}) must be after start_s ({start:g})")
    asked = int(args.get("num_frames", ctx.settings.max_frames_per_call))
    if asked < 1:
        raise ToolError(f"num_frames must be >= 1, got {asked}")
    track = ctx.video.track("seek")
    inside = [p for p in range(len(track.indices)) if start <= track.time(p) <= end]
    if not inside:  # a window narrower than the track's frame spacing: its nearest frame
        inside = [_nearest(track, (start + end) / 2)]
    k = min(asked, ctx.max_frames, len(inside))
    k = max(FRAME_FACTOR, k - k % FRAME_FACTOR)  # frames go in temporal pairs
    if k > ctx.max_frames:
        raise ToolError(f"the frame budget left ({ctx.max_frames}) is below one clip of {FRAME_FACTOR}")
    picks = sorted({inside[round(i * (len(inside) - 1) / max(k - 1, 1))] for i in range(k)})
    while len(picks) < k:  # fewer distinct frames than a pair: the last is repeated (qwen-vl-utils pads so)
        picks.append(picks[-1])
    clip = ctx.video.clip("seek", picks)
    times = clip.meta["frame_times"]
    return ToolResult(text=f"{k} frames from {times[0]:.2f} s to {times[-1]:.2f} s.", videos=[clip])


@register_tool(
    "frame_at",
    description="One frame of the video at time_s seconds, at a higher resolution than the first view.",
    parameters={
        "type": "object",
        "properties": {"time_s": {"type": "number", "description": "seconds"}},
        "required": ["time_s"],
        "additionalProperties": False,
    },
    tracks=("detail",),
)
def frame_at(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    t = _time_in_video(ctx, float(args["time_s"]), "time_s")
    track = ctx.video.track("detail")
    p = _nearest(track, t)
    frame = ctx.video.frames("detail", [p])[0]
    factor = get_family(ctx.video.family).frames.factor
    return ToolResult(text=f"Frame at {track.time(p):.2f} s.", images=[_image(frame, ctx.settings, factor)])


@register_tool(
    "zoom",
    description=(
        "A close-up of one frame: the region box = [x1, y1, x2, y2] (coordinates 0-1000 of the "
        "frame's width and height) of the frame at time_s seconds, enlarged."
    ),
    parameters={
        "type": "object",
        "properties": {
            "time_s": {"type": "number", "description": "seconds"},
            "box": {
                "type": "array",
                "items": {"type": "number"},
                "minItems": 4,
                "maxItems": 4,
                "description": "[x1, y1, x2, y2], 0-1000 relative to the frame",
            },
        },
        "required": ["time_s", "box"],
        "additionalProperties": False,
    },
    tracks=("detail",),
)
def zoom(ctx: ToolContext, args: dict[str, Any]) -> ToolResult:
    t = _time_in_video(ctx, float(args["time_s"]), "time_s")
    x1, y1, x2, y2 = (float(v) for v in args["box"])
    if not (0 <= x1 < x2 <= 1000 and 0 <= y1 < y2 <= 1000):
        raise ToolError(f"box must satisfy 0 <= x1 < x2 <= 1000 and 0 <= y1 < y2 <= 1000, got {args['box']}")
    track = ctx.video.track("detail")
    p = _nearest(track, t)
    frame = ctx.video.frames("detail", [p])[0]
    h, w = int(frame.shape[0]), int(frame.shape[1])
    # at least one pixel each way, inside the frame
    c0, c1 = min(int(x1 / 1000 * w), w - 1), max(min(round(x2 / 1000 * w), w), 1)
    r0, r1 = min(int(y1 / 1000 * h), h - 1), max(min(round(y2 / 1000 * h), h), 1)
    crop = frame[r0 : max(r1, r0 + 1), c0 : max(c1, c0 + 1)].contiguous()
    factor = get_family(ctx.video.family).frames.factor
    image = _image(crop, ctx.settings, factor)
    return ToolResult(
        text=f"Region {[round(v) for v in (x1, y1, x2, y2)]} of the frame at {track.time(p):.2f} s.",
        images=[image],
    )
