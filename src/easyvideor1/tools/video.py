"""The built-in video tools: ``seek`` (a clip of the seek track inside a time window),
``frame_at`` (the detail track's frame nearest a time) and ``zoom`` (a crop of that frame), each
image resized to the image budget. The tracks they read are ``tracks.py``'s; a tool of your own is
one file with one :func:`~.base.register_tool` (see ``base.py``).
"""

from __future__ import annotations

from typing import Any

from ..media.resize import resize_frames
from ..media.sampling import FRAME_FACTOR, image_size
from ..models.families import get_family
from .base import ToolContext, ToolError, ToolResult, register_tool
from .tracks import Track


def _time_in_video(ctx: ToolContext, t: float, what: str) -> float:
    duration = ctx.video.duration
    if not 0 <= t <= duration:
        raise ToolError(f"{what} {t:g} s is outside the video (0 to {duration:.2f} s)")
    return t


def _nearest(track: Track, t: float) -> int:
    return min(range(len(track.indices)), key=lambda p: (abs(track.time(p) - t), p))


def _detail_frame(ctx: ToolContext, args: dict[str, Any]):
    """``(its time, uint8 [H, W, 3])`` of the detail track's frame nearest ``args["time_s"]``."""
    t = _time_in_video(ctx, float(args["time_s"]), "time_s")
    track = ctx.video.track("detail")
    p = _nearest(track, t)
    return track.time(p), ctx.video.frames("detail", [p])[0]


def _image(ctx: ToolContext, frame):
    """A uint8 ``[H, W, 3]`` frame as a PIL image within the image budget (the family's factor grid)."""
    from PIL import Image

    settings = ctx.settings
    factor = get_family(ctx.video.family).frames.factor
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
    if not end > start:  # NaN too
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
    at, frame = _detail_frame(ctx, args)
    return ToolResult(text=f"Frame at {at:.2f} s.", images=[_image(ctx, frame)])


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
    x1, y1, x2, y2 = (float(v) for v in args["box"])
    if not (0 <= x1 < x2 <= 1000 and 0 <= y1 < y2 <= 1000):
        raise ToolError(f"box must satisfy 0 <= x1 < x2 <= 1000 and 0 <= y1 < y2 <= 1000, got {args['box']}")
    at, frame = _detail_frame(ctx, args)
    h, w = int(frame.shape[0]), int(frame.shape[1])
    # at least one pixel each way, inside the frame
    c0, c1 = min(int(x1 / 1000 * w), w - 1), max(min(round(x2 / 1000 * w), w), 1)
    r0, r1 = min(int(y1 / 1000 * h), h - 1), max(min(round(y2 / 1000 * h), h), 1)
    crop = frame[r0 : max(r1, r0 + 1), c0 : max(c1, c0 + 1)].contiguous()
    return ToolResult(
        text=f"Region {[round(v) for v in (x1, y1, x2, y2)]} of the frame at {at:.2f} s.",
        images=[_image(ctx, crop)],
    )
