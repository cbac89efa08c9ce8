"""PyAV video decoding into uint8 RGB frames.

Design:
- ``probe_video`` demuxes packets without decoding (cheap) to learn the frame count, the
  presentation timestamp of every frame and the keyframes. This is robust where container headers
  lie or say nothing (WebM reports 0 frames, variable frame rate, B-frames reorder packets).
  Frame ``i`` is the i-th frame in presentation order, as in decord and qwen-vl-utils. Packets the
  container marks as discarded (an MP4 edit list, e.g. ``ffmpeg -ss T -c copy``, keeps the GOP
  before the cut point and hides it) are not frames: frame 0 is the first frame a player shows.
- A file shorter than its container declares (a cut download) is reported, not silently used as a
  shorter video, unless truncated files are allowed (``truncation.py`` says what is compared).
- ``read_frames`` decodes only what is needed, and can hand each frame to a resizer as soon as
  it is decoded, so an 8000x8000 source never has more than one full-size frame alive. Between
  two wanted frames it either keeps decoding forward or seeks to the keyframe before the next
  wanted frame, whichever skips more work: a seek
  pays off only when it jumps over at least ``seek_min_skip`` frames (measured on this project's
  machine: a 16-of-300-frame read takes 0.20 s sequentially, 1.07 s seeking with a 250-frame GOP and
  0.24 s with a 30-frame GOP). Dense sampling of short-GOP video therefore stays sequential and
  sparse sampling of long video seeks.
- The video stream is the one ffmpeg and decord pick, never cover art (``_video_stream``).
- Frames become RGB as the ``ffmpeg`` command line converts them (``rgb.py``).
- Display rotation metadata is applied, so portrait phone videos come out upright.
- A deadline turns a decoder that stalls into a :class:`DecodeError` instead of a hang; the batch
  preprocessor additionally runs each video in a worker process it can kill.
"""

from __future__ import annotations

import bisect
import os
import time
from dataclasses import dataclass, field
from fractions import Fraction

import av
import numpy as np

from . import rgb
from .failures import DecodeError, not_regular
from .resize import FrameCollector
from .truncation import ReadExtent, truncation_reason

# Decoder threads per video: 0 lets FFmpeg choose (all cores). Worker pools set 1, since they
# already run one process per core and extra threads would only contend.
_DECODE_THREADS = 0


def set_decode_threads(n: int) -> None:
    global _DECODE_THREADS
    _DECODE_THREADS = int(n)
    rgb.set_threads(n)  # the RGB conversion's scaler threads follow the decoder's


@dataclass
class VideoInfo:
    """What a demux pass learns about a video stream.

    Frames are the ones the container *shows*: packets it marks as discarded (MP4 edit lists keep
    the GOP before a cut point so the first shown frame can be decoded, and mark it discarded)
    are decoded but never counted, so frame 0 is the first frame a player shows.
    """

    path: str
    width: int
    height: int
    fps: float  # average frame rate, as decord's get_avg_fps
    total_frames: int
    frame_pts: list[int] = field(repr=False)  # presentation timestamps, sorted; frame i has frame_pts[i]
    keyframes: list[int] = field(repr=False)  # sorted frame indices where decoding can start
    time_base: Fraction | None = None
    codec: str = ""
    hidden_pts: frozenset[int] = field(default_factory=frozenset, repr=False)  # discarded packets
    truncated: str = ""  # why the file is shorter than its container declares ("" if it is not)
    stream: int | None = None  # index of the video stream probed (None: choose it again when decoding)

    @property
    def duration(self) -> float:
        return self.total_frames / self.fps if self.fps > 0 else 0.0

    def frame_time(self, index: int) -> float:
        """Presentation time of frame ``index`` in seconds, counted from the first shown frame."""
        if self.time_base is None:
            return index / self.fps
        return float((self.frame_pts[index] - self.frame_pts[0]) * self.time_base)


def _open(path: str) -> av.container.InputContainer:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise DecodeError(f"{path}: file not found") from None
    cause = not_regular(st.st_mode)  # av.open of a FIFO blocks until a writer appears
    if cause is not None:
        raise DecodeError(f"{path}: {cause}")
    if st.st_size == 0:
        raise DecodeError(f"{path}: file is empty (0 bytes)")
    try:
        return av.open(path, metadata_errors="ignore")
    except av.FFmpegError as e:
        raise DecodeError(f"{path}: not a readable media file ({e})") from e


# Streams that are pictures, not video: cover art (MP4 ``covr``, Matroska attachments, ...) and
# streams flagged as still images. ffmpeg and decord never pick these when the file has a video track.
_STILL = av.stream.Disposition.attached_pic | av.stream.Disposition.still_image
_IMPAIRED = av.stream.Disposition.hearing_impaired | av.stream.Disposition.visual_impaired
# How far the frame count of competing streams is looked for: what ffmpeg's stream analysis reads
# by default (probesize 5 MB); it counts up to 5 frames per stream.
_PROBE_BYTES = 5_000_000
_MULTIFRAME = 5


def _video_stream(
    container: av.container.InputContainer, path: str, index: int | None = None
) -> av.video.stream.VideoStream:
    """The stream ``index``, or the video stream ffmpeg's ``av_find_best_stream`` would pick.

    Its order, in ``libavformat``: a stream not flagged hearing/visually impaired (+1) and flagged
    default (+1) first; then the one with more frames seen while probing (capped at 5, so a still
    picture loses to any real video); then the higher bit rate; then more frames; then the lower
    index. Attached pictures and still-image streams are skipped outright (``av_find_best_stream``
    only ranks them down, so a *default* cover would win there; the ``ffmpeg`` command line and
    decord's callers never want it). ``probe_video`` records the choice in ``VideoInfo.stream`` and
    decoding opens that same stream.
    """
    if index is not None:
        if index >= len(container.streams) or container.streams[index].type != "video":
            raise DecodeError(f"{path}: stream #{index} is no longer a video stream (the file changed)")
        return container.streams[index]
    video = list(container.streams.video)
    if not video:
        kinds = sorted({s.type for s in container.streams}) or ["none"]
        raise DecodeError(f"{path}: no video stream (streams: {', '.join(kinds)})")
    moving = [s for s in video if not (s.disposition & _STILL)]
    if not moving:
        which = ", ".join(f"#{s.index} {s.codec_context.name}" for s in video)
        raise DecodeError(f"{path}: no video track, only still pictures (cover art: stream {which})")
    if len(moving) == 1:
        return moving[0]
    counts = _early_frame_counts(path, [s.index for s in moving])

    def rank(s: av.video.stream.VideoStream) -> tuple[int, int, int, int]:
        disposition = (not (s.disposition & _IMPAIRED)) + bool(s.disposition & av.stream.Disposition.default)
        n = counts[s.index]
        return (disposition, min(_MULTIFRAME, n), s.codec_context.bit_rate or 0, n)

    best = moving[0]
    for s in moving[1:]:
        if rank(s) > rank(best):  # strictly better: ties keep the lower index, as ffmpeg does
            best = s
    return best


def _early_frame_counts(path: str, indices: list[int]) -> dict[int, int]:
    """Non-empty packets per stream in the first ``_PROBE_BYTES`` of packet data (a separate open:
    the caller's container stays at the start for its own demux pass)."""
    counts = dict.fromkeys(indices, 0)
    read = 0
    with _open(path) as container:
        try:
            for packet in container.demux([container.streams[i] for i in indices]):
                if packet.size:
                    counts[packet.stream.index] += 1
                    read += packet.size
                if read > _PROBE_BYTES or min(counts.values()) >= _MULTIFRAME:
                    break
        except av.FFmpegError:
            pass  # a damaged file: rank on what was read; the demux pass reports the damage
    return counts


def _stream_fps(stream: av.video.stream.VideoStream, n: int, span_seconds: float) -> float:
    for rate in (stream.average_rate, stream.guessed_rate, stream.base_rate):
        if rate and float(rate) > 0:
            return float(rate)
    if span_seconds > 0:
        return n / span_seconds
    raise DecodeError("cannot determine the frame rate")


@dataclass
class _Demuxed:
    """Raw results of the demux pass (timestamps in the stream's time base)."""

    shown: list[int] = field(default_factory=list)
    hidden: set[int] = field(default_factory=set)
    key_pts: list[int] = field(default_factory=list)
    packets: int = 0
    partial: int = 0
    missing_pts: int = 0
    end_pts: int | None = None  # latest end (pts + duration) of a shown frame; None if durations unknown
    read_error: str = ""


def _demux(container, stream, path: str, deadline: float | None) -> _Demuxed:
    file_size = os.path.getsize(path)
    d = _Demuxed()
    try:
        for packet in container.demux(stream):
            if packet.size == 0 and packet.pts is None and packet.dts is None:
                continue  # flush packet
            if deadline is not None and time.monotonic() > deadline:
                raise DecodeError(f"{path}: time limit exceeded while reading the container")
            d.packets += 1
            if packet.size == 0:
                continue  # an empty chunk (AVI drop frame): counted by headers, carries no picture
            p = packet.pts if packet.pts is not None else packet.dts
            if p is None:
                d.missing_pts += 1
                continue
            pos = packet.pos
            if pos is not None and pos >= 0 and pos + packet.size > file_size:
                d.partial += 1  # its data runs past the end of the file: cannot decode
                continue
            if packet.is_keyframe:
                d.key_pts.append(p)
            if packet.is_discard:
                d.hidden.add(p)  # decoded for the frames after it, never shown
                continue
            d.shown.append(p)
            if packet.duration:
                d.end_pts = max(d.end_pts if d.end_pts is not None else p, p + packet.duration)
    except av.FFmpegError as e:
        if not d.shown:
            raise DecodeError(f"{path}: cannot read packets ({e})") from e
        d.read_error = str(e)  # a damaged tail: the truncation check decides whether that matters
    return d


def probe_video(path: str, deadline: float | None = None, allow_truncated: bool = False) -> VideoInfo:
    """Frame count, fps, per-frame timestamps and keyframes of the file's video stream.

    The stream is the one ffmpeg picks (see :func:`_video_stream`: cover art and other still pictures
    are never it); :func:`read_frames` decodes the same one.

    A file shorter than its container declares (see :mod:`.truncation`) is a :class:`DecodeError`
    unless ``allow_truncated``; then its readable frames are used and ``truncated`` says why.
    """
    path = str(path)
    with _open(path) as container:
        stream = _video_stream(container, path)
        d = _demux(container, stream, path, deadline)
        if d.missing_pts or not d.shown:
            raise DecodeError(f"{path}: video packets carry no timestamps; cannot index frames")
        pts = sorted(d.shown)
        # a keyframe (shown or discarded) starts decoding at the first shown frame at or after it
        keyframes = sorted({bisect.bisect_left(pts, k) for k in d.key_pts if k <= pts[-1]}) or [0]
        tb = stream.time_base
        span = float((pts[-1] - pts[0]) * tb) if tb and len(pts) > 1 else 0.0
        ctx = stream.codec_context
        if not ctx.width or not ctx.height:
            raise DecodeError(f"{path}: video stream has no frame size")
        fps = _stream_fps(stream, len(pts), span)
        frame_seconds = 1.0 / fps
        end = float(d.end_pts * tb) if tb and d.end_pts is not None else float(pts[-1] * tb) + frame_seconds
        extent = ReadExtent(d.packets, end, d.partial, frame_seconds, d.read_error)
        truncated = truncation_reason(container, stream, extent)
        if truncated and not allow_truncated:
            raise DecodeError(
                f"{path}: truncated file: {truncated} (set data.allow_truncated=true to use the readable part)"
            )
        return VideoInfo(
            path=path,
            width=ctx.width,
            height=ctx.height,
            fps=fps,
            total_frames=len(pts),
            frame_pts=pts,
            keyframes=keyframes,
            time_base=tb,
            codec=ctx.name,
            hidden_pts=frozenset(d.hidden),
            truncated=truncated,
            stream=stream.index,
        )


def read_frames(
    info: VideoInfo,
    indices: list[int],
    deadline: float | None = None,
    seek_min_skip: int = 48,
    collector: FrameCollector | None = None,
) -> np.ndarray:
    """Decode the frames at ``indices`` (sorted, may repeat) as uint8 ``[T, H, W, 3]`` RGB.

    ``collector`` receives each wanted frame as soon as it is decoded (default: RGB at source size
    with the display rotation applied); :class:`~.resize.FrameResizer` resizes them in batches of
    bounded size, so memory follows the output, not the source resolution.
    """
    if not indices:
        raise ValueError("no frame indices requested")
    if indices != sorted(indices) or indices[0] < 0 or indices[-1] >= info.total_frames:
        raise ValueError(
            f"frame indices must be sorted within [0, {info.total_frames}), got {indices[:3]}..."
        )
    wanted = sorted(set(indices))
    collector = collector if collector is not None else FrameCollector()
    try:
        _decode(info, wanted, collector, deadline, seek_min_skip)
    except _SeekFallback:
        collector.clear()  # a seek misbehaved on this file: decode it front to back instead
        _decode(info, wanted, collector, deadline, None)
    got = collector.finish()
    if len(got) < len(wanted):
        missing = [i for i in wanted if i not in got]
        # Trailing frames a broken encoder never emitted: reuse the last good frame, but only for a
        # couple; anything more means the file is damaged and must be reported.
        if got and missing[0] > max(got) and len(missing) <= 2:
            for i in missing:
                got[i] = got[max(got)]
        else:
            raise DecodeError(
                f"{info.path}: {len(missing)} of {len(wanted)} wanted frames could not be decoded "
                f"(first missing: frame {missing[0]} of {info.total_frames})"
            )
    return np.stack([got[i] for i in indices])


class _SeekFallback(Exception):
    pass


def _decode(
    info: VideoInfo,
    wanted: list[int],
    got: FrameCollector,
    deadline: float | None,
    seek_min_skip: int | None,
):
    """Fill ``got`` with the wanted frames; seek over gaps longer than ``seek_min_skip`` (None: never)."""
    pts_to_index = {p: i for i, p in enumerate(info.frame_pts)}
    remaining = set(wanted)
    keyframes = info.keyframes

    def keyframe_before(i: int) -> int:
        return keyframes[bisect.bisect_right(keyframes, i) - 1]

    with _open(info.path) as container:
        stream = _video_stream(container, info.path, info.stream)
        if _DECODE_THREADS != 1:
            stream.thread_type = "AUTO"
        if _DECODE_THREADS:
            stream.codec_context.thread_count = _DECODE_THREADS
        pos: int | None = -1  # index of the last decoded frame; None right after a seek
        w = 0  # next wanted frame is wanted[w]
        try:
            while w < len(wanted):
                key = keyframe_before(wanted[w])
                if seek_min_skip is not None and pos is not None and key - pos > seek_min_skip:
                    container.seek(info.frame_pts[key], stream=stream, backward=True, any_frame=False)
                    pos = None
                for frame in container.decode(stream):
                    if deadline is not None and time.monotonic() > deadline:
                        raise DecodeError(f"{info.path}: time limit exceeded while decoding")
                    if frame.pts is not None and frame.pts in pts_to_index:
                        pos = pts_to_index[frame.pts]
                    elif frame.pts is not None and frame.pts in info.hidden_pts:
                        continue  # a discarded frame (before an edit list's start): never shown
                    elif pos is not None and seek_min_skip is None:
                        pos += 1  # no usable timestamp: count frames (only safe without seeking)
                    else:
                        raise _SeekFallback
                    if pos in remaining:
                        got.add(pos, frame)
                        remaining.discard(pos)
                    del frame  # hand its buffer back before the decoder needs one for the next frame
                    while w < len(wanted) and wanted[w] in got:
                        w += 1
                    if w == len(wanted):
                        return
                    if pos > wanted[w]:
                        if seek_min_skip is None:
                            continue  # sequential: a frame never came out; report it as missing later
                        raise _SeekFallback  # a seek landed past the frame we wanted
                    if seek_min_skip is not None and keyframe_before(wanted[w]) - pos > seek_min_skip:
                        break  # cheaper to seek than to decode through the gap
                else:
                    return  # end of stream
        except av.FFmpegError as e:
            if not got:
                raise DecodeError(f"{info.path}: decoding failed ({e})") from e
            # a damaged tail: keep what was decoded; the caller reports missing frames
