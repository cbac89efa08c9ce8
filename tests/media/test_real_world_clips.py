"""Real-world clips (issue 11 item 5): edit lists, truncated files, variable frame rate.

Every file is made here with PyAV: a clip cut the way ``ffmpeg -ss 3.3 -i in.mp4 -c copy -t 6``
cuts it (packets from the keyframe before the cut point, timestamps shifted so the cut point is 0:
the MP4 muxer then writes an edit list and the demuxer marks the earlier packets as discarded),
files cut short, and a 24-then-60 fps file. The frames' content says which source frame they are
(``gradient_frames`` draws a bar whose column encodes the frame index).
"""

from __future__ import annotations

import json
import re
import struct
from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest

from easyvideor1.data.config import DataConfig
from easyvideor1.data.dataset import RecordDataset, encode_sample, load_media, raw_media
from easyvideor1.data.preprocess import preprocess
from easyvideor1.data.records import load_records
from easyvideor1.media.decode import DecodeError, probe_video, read_frames
from easyvideor1.media.encode import encode_video
from easyvideor1.media.sampling import SamplingParams
from easyvideor1.media.video import sample_video
from easyvideor1.models.tiny import build_processor
from tests.conftest import gradient_frames, make_video

WIDTH = 320  # bar column ~= 1.07 x frame index for a 300-frame source: every frame is told apart


def _bar(frame: np.ndarray) -> float:
    """Centre column of the bright bar."""
    red = frame[:, :, 0].astype(float).mean(axis=0)
    return float(np.nonzero(red > (red.max() + np.median(red)) / 2)[0].mean())


def _source_index(frame: np.ndarray, n: int) -> float:
    """Which source frame (of ``n``) this decoded frame shows, from its bar column."""
    return _bar(frame) * (n - 1) / (frame.shape[1] - 1)


def cut_copy(src: str, dst: str, start: float, duration: float, keep_from: float | None = None) -> None:
    """``ffmpeg -ss start -i src -c copy -t duration dst``, done with PyAV packet remuxing.

    Packets from the keyframe before ``keep_from`` (default: ``start``) are copied, with timestamps
    shifted so that ``start`` becomes 0: the ones before it get negative times, and the MP4 muxer
    writes an edit list that starts the presentation at the cut point.
    """
    keep_from = start if keep_from is None else keep_from
    with av.open(src) as inp, av.open(dst, "w") as out:
        s = inp.streams.video[0]
        o = out.add_stream_from_template(s)
        tb = s.time_base
        inp.seek(int(keep_from / tb), stream=s, backward=True, any_frame=False)
        shift = int(round(start / tb))
        for p in inp.demux(s):
            if p.dts is None:
                continue
            if p.pts * tb >= Fraction(str(start + duration)):
                break  # the source has no B-frames: decode order is presentation order
            p.pts -= shift
            p.dts -= shift
            p.stream = o
            out.mux(p)


def mp4_boxes(data: bytes, off: int = 0, end: int | None = None, depth: int = 0) -> list[tuple]:
    """(depth, type, offset, size) of every box on the path to the sample tables."""
    end = len(data) if end is None else end
    out = []
    while off + 8 <= end:
        size, kind = struct.unpack(">I4s", data[off : off + 8])
        kind = kind.decode("latin1")
        size = struct.unpack(">Q", data[off + 8 : off + 16])[0] if size == 1 else size or end - off
        out.append((depth, kind, off, size))
        if kind in ("moov", "trak", "edts", "mdia"):
            out += mp4_boxes(data, off + 8, off + size, depth + 1)
        off += size
    return out


def edit_list(path: str) -> list[tuple[int, int]]:
    """(segment duration, media time) of each ``elst`` entry (ISO 14496-12 8.6.6)."""
    data = Path(path).read_bytes()
    entries = []
    for _, kind, off, _size in mp4_boxes(data):
        if kind != "elst":
            continue
        version = data[off + 8]
        (count,) = struct.unpack(">I", data[off + 12 : off + 16])
        fmt, step = (">QqI", 20) if version == 1 else (">IiI", 12)
        for i in range(count):
            dur, media_time, _rate = struct.unpack(fmt, data[off + 16 + i * step : off + 16 + (i + 1) * step])
            entries.append((dur, media_time))
    return entries


def set_edit_duration(path: str, dst: str, movie_units: int) -> None:
    """Copy of an MP4 whose (version 0) edit ends after ``movie_units`` (an edit that trims the end)."""
    data = bytearray(Path(path).read_bytes())
    for _, kind, off, _ in mp4_boxes(bytes(data)):
        if kind == "elst":
            struct.pack_into(">I", data, off + 16, movie_units)
    Path(dst).write_bytes(bytes(data))


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("clips")
    return make_video(d, "source", fps=30, duration=10, size=(WIDTH, 32), gop=30)  # keyframes every 1 s


@pytest.fixture(scope="module")
def trimmed(source, tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("cut") / "cut.mp4")
    cut_copy(source, path, 3.3, 6.0)
    return path


def test_the_trimmed_file_really_has_an_edit_list_and_discarded_packets(trimmed):
    (duration, media_time), *rest = edit_list(trimmed)
    assert not rest
    with av.open(trimmed) as c:
        s = c.streams.video[0]
        packets = [p for p in c.demux(s) if p.size]
        assert media_time == round(0.3 / s.time_base)  # presentation starts 0.3 s into the media
    assert 6000 <= duration <= 6040  # movie time scale 1000: ~6 s shown (the muxer rounds up)
    hidden = [p for p in packets if p.is_discard]
    assert len(hidden) == 9 and len(packets) == 189  # 3.0-3.3 s kept for decoding, never shown


def test_edit_list_clip_decodes_the_shown_frames_only(trimmed):
    info = probe_video(trimmed)
    assert info.total_frames == 180 and not info.truncated  # 3.3 s .. 9.3 s at 30 fps
    video = sample_video(trimmed, SamplingParams(factor=32))  # failed: "1 of 12 wanted frames ..."
    for i, frame in zip(video.meta["frame_indices"], video.frames.numpy(), strict=True):
        assert abs(_source_index(frame, 300) - (99 + i)) <= 3, "frame i is source frame 99 + i"
    assert video.meta["frame_times"] == pytest.approx([i / 30 for i in video.meta["frame_indices"]])


def test_edit_list_clip_window_gives_frames_at_the_right_times(trimmed):
    video = sample_video(trimmed, SamplingParams(factor=32, fps=2, video_start=2.0, video_end=4.0))
    assert video.meta["frame_indices"] == [60, 80, 100, 120]
    assert video.meta["frame_times"] == pytest.approx([2.0, 2.667, 3.333, 4.0], abs=1e-3)
    # 2 s into the clip is 5.3 s into the source (frame 159): it used to be 1.3 s early (frame 120)
    shown = [_source_index(f, 300) for f in video.frames.numpy()]
    assert shown == pytest.approx([159, 179, 199, 219], abs=3)  # (resized: a pixel is ~1.3 frames)


def test_edit_list_clip_seeking_and_sequential_decoding_agree(trimmed):
    info = probe_video(trimmed)
    wanted = [0, 1, 2, 60, 61, 150, 179]
    seq = read_frames(info, wanted, seek_min_skip=10**9)
    seek = read_frames(info, wanted, seek_min_skip=0)
    np.testing.assert_array_equal(seq, seek)
    assert [round(_source_index(f, 300)) for f in seq] == pytest.approx([99 + i for i in wanted], abs=1.5)


def test_edit_lists_that_drop_a_gop_or_trim_the_end_are_not_truncation(source, trimmed, tmp_path):
    early = str(tmp_path / "gop_before.mp4")
    cut_copy(source, early, 3.3, 6.0, keep_from=2.0)  # a whole GOP the edit list skips
    end_trim = str(tmp_path / "end_trim.mp4")
    set_edit_duration(trimmed, end_trim, 4000)  # the edit shows 4 s of the 6.3 s of media
    assert edit_list(end_trim)[0][0] == 4000
    for path, n in ((early, 180), (end_trim, 120)):
        info = probe_video(path)
        assert (info.total_frames, info.truncated) == (n, "")
        frames = read_frames(info, [0, n - 1])
        assert [_source_index(f, 300) for f in frames] == pytest.approx([99, 98 + n], abs=1.5)


def _faststart_mp4(src: str, dst: str) -> str:
    with av.open(src) as inp, av.open(dst, "w", options={"movflags": "faststart"}) as out:
        s = inp.streams.video[0]
        o = out.add_stream_from_template(s)
        for p in inp.demux(s):
            if p.dts is not None:
                p.stream = o
                out.mux(p)
    return dst


def _make(kind: str, d: Path) -> str:
    """A complete 4 s, 30 fps file of one container family."""
    if kind == "faststart_mp4":
        return _faststart_mp4(make_video(d, "plain", fps=30, duration=4, size=(96, 64)), str(d / "fs.mp4"))
    if kind == "mkv":
        return encode_video(str(d / "v.mkv"), gradient_frames(120, 64, 96), 30, codec="h264")
    codec = {"webm": "vp9", "avi": "mjpeg"}[kind]
    return make_video(d, kind, fps=30, duration=4, size=(96, 64), codec=codec)


@pytest.mark.parametrize("kind", ["faststart_mp4", "mkv", "webm", "avi"])
def test_truncated_files_are_reported_unless_allowed(tmp_path, kind):
    whole = _make(kind, tmp_path)
    complete = sample_video(whole, SamplingParams(factor=32))
    assert complete.meta["truncated"] == "" and complete.meta["total_frames"] == 120
    data = Path(whole).read_bytes()
    cut = tmp_path / f"cut{Path(whole).suffix}"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(DecodeError, match=r"truncated file: .*declared.*allow_truncated") as e:
        sample_video(str(cut), SamplingParams(factor=32))
    assert str(cut) in str(e.value)
    part = sample_video(str(cut), SamplingParams(factor=32, allow_truncated=True))
    assert "declared" in part.meta["truncated"]
    assert 20 <= part.meta["total_frames"] < 100
    assert part.meta["params"]["allow_truncated"] is True  # never served to a strict run


def test_preprocess_lists_a_truncated_file_as_a_failure(tmp_path):
    whole = _make("faststart_mp4", tmp_path)
    data = Path(whole).read_bytes()
    (tmp_path / "cut.mp4").write_bytes(data[: len(data) // 2])
    rows = [{"problem_id": "cut", "problem": "q", "answer": "a", "videos": ["cut.mp4"]}]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = preprocess(
        [str(tmp_path / "d.jsonl")],
        DataConfig(model_family="qwen3vl"),
        str(tmp_path / "c1"),
        workers=1,
        progress=False,
    )
    assert (report["built"], report["failed"]) == (0, 1)
    (failure,) = [json.loads(x) for x in (tmp_path / "c1" / "failures.jsonl").read_text().splitlines()]
    assert failure["record"] == "cut" and "truncated file" in failure["reason"]
    allowed = DataConfig(model_family="qwen3vl", allow_truncated=True)
    report = preprocess([str(tmp_path / "d.jsonl")], allowed, str(tmp_path / "c2"), workers=1, progress=False)
    assert (report["built"], report["failed"]) == (1, 0)


def _vfr_24_then_60(path: str) -> list[float]:
    """2 s at 24 fps then 2 s at 60 fps (168 frames); returns each frame's true time."""
    exact = [Fraction(i, 24) for i in range(48)] + [2 + Fraction(i, 60) for i in range(120)]
    times = [float(t) for t in exact]  # correctly rounded, as a time-base fraction converts
    tb = Fraction(1, 120)
    with av.open(path, "w") as out:
        s = out.add_stream("libx264", rate=60)
        s.width, s.height, s.pix_fmt = WIDTH, 32, "yuv420p"
        s.options = {"preset": "ultrafast"}
        s.codec_context.time_base = tb
        for t, img in zip(times, gradient_frames(len(times), 32, WIDTH), strict=True):
            f = av.VideoFrame.from_ndarray(img, format="rgb24")
            f.pts, f.time_base = round(t / tb), tb
            for p in s.encode(f):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
    return times


def test_variable_frame_rate_timestamps_reach_the_model(tmp_path):
    times = _vfr_24_then_60(str(tmp_path / "vfr.mp4"))
    info = probe_video(str(tmp_path / "vfr.mp4"))
    assert info.total_frames == 168 and info.fps == pytest.approx(42)  # average rate: 168 / 4 s
    assert [info.frame_time(i) for i in range(168)] == pytest.approx(times, abs=1e-9)
    (tmp_path / "d.jsonl").write_text(
        json.dumps({"problem_id": "v", "problem": "?", "answer": "a", "videos": ["vfr.mp4"]})
    )
    records = load_records(str(tmp_path / "d.jsonl"))
    processor = build_processor("qwen3vl")
    said = {}
    for mode in ("index", "pts"):
        cfg = DataConfig(
            model_family="qwen3vl",
            video_fps=2.0,
            video_min_pixels=4 * 32 * 32,
            video_max_pixels=16 * 32 * 32,
            cache_mode="decode_only",
            timestamps=mode,
        )
        ds = RecordDataset(records, cfg, str(tmp_path / "d.jsonl"))
        text = processor.tokenizer.decode(encode_sample(processor, ds[0], cfg, ds.loader)["input_ids"][0])
        said[mode] = [float(x) for x in re.findall(r"<([\d.]+) seconds>", text)]
        videos, _ = load_media(ds[0], cfg, ds.loader)
        indices = videos[0].meta["frame_indices"]
        meta = raw_media(videos, [])["video"][0][1]  # what vLLM's processor is given
        truth = [times[i] for i in indices]
        told = [x / meta["fps"] for x in meta["frames_indices"]]
        assert told == (truth if mode == "pts" else [i / 42 for i in indices])  # exact, not approximate
        shown = [_source_index(f, 168) for f in videos[0].frames.numpy()]
        assert shown == pytest.approx(indices, abs=3)
    indices = [0, 24, 48, 72, 95, 119, 143, 167]  # 4 s at 2 fps: qwen-vl-utils' linspace over 168 frames
    pairs = [(indices[k], indices[k + 1]) for k in range(0, 8, 2)]
    assert said["index"] == [round((a + b) / 2 / 42, 1) for a, b in pairs]  # equal to qwen-vl-utils
    assert said["pts"] == [round((times[a] + times[b]) / 2, 1) for a, b in pairs]
    assert max(abs(a - b) for a, b in zip(said["index"], said["pts"], strict=True)) >= 0.5


def test_the_settings_are_validated_with_their_key():
    from easyvideor1.config import ConfigError, load_config

    cfg = load_config(
        overrides=["data.timestamps=pts", "data.allow_truncated=true", "data.model_family=qwen3vl"]
    ).data
    assert (cfg.timestamps, cfg.sampling_params().allow_truncated) == ("pts", True)
    assert load_config().data.timestamps == "index"  # default: equal to qwen-vl-utils
    with pytest.raises(ConfigError, match="data.timestamps must be one of index, pts"):
        load_config(overrides=["data.timestamps=wall"])
    with pytest.raises(ConfigError, match="data.allow_truncated"):
        load_config(overrides=["data.allow_truncated=maybe"])
