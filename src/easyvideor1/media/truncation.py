"""Is a video file shorter than its container says? (A cut download or an interrupted copy.)

A faststart MP4 whose tail is missing still opens: its ``moov`` box, at the front, describes
every sample, and the demuxer simply stops where the data ends. Such a file used to be cached as
a shorter video. This module compares what the container *declares* with what the demux pass could
*read*, per container family, using only declarations that survive truncation:

- MP4/MOV: the track duration from ``moov`` (with an edit list FFmpeg reports the edit's
  duration) and the sample count. Both must fall short: an edit list that trims samples leaves the
  count short but the duration right, and an edit that holds the last frame past the media leaves
  the duration short but every sample present.
- Matroska/WebM: the per-track ``DURATION`` tag (FFmpeg and mkvmerge write one), capped by the
  segment duration; the segment duration alone only when the video is the file's only stream
  (it covers the longest stream, often the audio).
- AVI: the frame count of the stream header (FFmpeg re-estimates an AVI's duration from the
  part it can index, so the duration proves nothing there).
- Anything else (MPEG-TS, raw streams, ...) declares no length: a cut file cannot be told from a
  short one, and is not reported.

A packet whose data runs past the end of the file is always truncation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import av

# Slack for rounding between a container's declared duration and the frames' own timestamps.
_MIN_SLACK_SECONDS = 0.1
_SLACK_FRAMES = 2.5
_SLACK_COUNT = 2  # frames a header count may exceed the packets by (encoders that drop a frame or two)

_TAG_DURATION = re.compile(r"^(\d+):(\d{1,2}):(\d{1,2}(?:\.\d*)?)$")


@dataclass
class ReadExtent:
    """What the demux pass actually found in the file."""

    packets: int  # every packet with a timestamp, shown, discarded or empty (what headers count)
    end_seconds: float  # end of the last shown frame (its pts plus its duration)
    partial_packets: int  # packets whose data runs past the end of the file
    frame_seconds: float  # one typical frame duration
    read_error: str = ""  # the demuxer's error, if reading stopped early


def _families(container: av.container.InputContainer) -> set[str]:
    return set((container.format.name or "").split(","))


def _tag_seconds(stream: av.video.stream.VideoStream) -> float | None:
    """The Matroska ``DURATION`` tag ("HH:MM:SS.nnnnnnnnn"), in seconds."""
    for key, value in stream.metadata.items():
        if key.upper().split("-")[0] == "DURATION":
            m = _TAG_DURATION.match(str(value).strip())
            if m:
                return int(m[1]) * 3600 + int(m[2]) * 60 + float(m[3])
    return None


def declared_seconds(
    container: av.container.InputContainer, stream: av.video.stream.VideoStream
) -> float | None:
    """The video stream's length as its container declares it, where that survives truncation."""
    families = _families(container)
    if families & {"mov", "mp4"}:
        if stream.duration and stream.time_base:
            return float(stream.duration * stream.time_base)
        return None
    if families & {"matroska", "webm"}:
        segment = container.duration / av.time_base if container.duration else None
        tag = _tag_seconds(stream)
        if tag is not None:
            return min(tag, segment) if segment else tag
        return segment if len(container.streams) == 1 else None
    return None


def declared_frames(
    container: av.container.InputContainer, stream: av.video.stream.VideoStream
) -> int | None:
    """The frame (sample) count the container's header declares, if it means anything here."""
    if stream.frames and _families(container) & {"avi", "mov", "mp4"}:
        return int(stream.frames)
    return None


def truncation_reason(
    container: av.container.InputContainer, stream: av.video.stream.VideoStream, extent: ReadExtent
) -> str:
    """Why the file looks truncated (declared vs readable), or "" if it does not."""
    after = f" (reading stopped: {extent.read_error})" if extent.read_error else ""
    if extent.partial_packets:
        return f"{extent.partial_packets} frame(s) run past the end of the file{after}"
    families = _families(container)
    frames = declared_frames(container, stream)
    seconds = declared_seconds(container, stream)
    short_count = frames is not None and frames - extent.packets > _SLACK_COUNT
    slack = max(_SLACK_FRAMES * extent.frame_seconds, _MIN_SLACK_SECONDS)
    short_time = seconds is not None and seconds - extent.end_seconds > slack
    counted = f"{extent.packets} of {frames} declared frames"
    timed = f"frames end at {extent.end_seconds:.3f} s of a declared {seconds:.3f} s" if seconds else ""
    if "avi" in families and short_count:
        return f"{counted} are in the file{after}"
    if families & {"mov", "mp4"} and short_time and (frames is None or short_count):
        return f"{timed}, {counted} are in the file{after}"
    if families & {"matroska", "webm"} and short_time:
        return f"{timed}{after}"
    return ""
