"""PyAV decoding: frame counting, seeking vs sequential, rotation, odd inputs, time limits."""

from __future__ import annotations

import time
from fractions import Fraction

import av
import numpy as np
import pytest

from easyvideor1.media.decode import DecodeError, probe_video, read_frames
from easyvideor1.media.encode import encode_video
from easyvideor1.media.sampling import SamplingParams
from easyvideor1.media.video import sample_video
from tests.conftest import make_video


def _bar_position(frame: np.ndarray) -> int:
    """Column of the bright bar that ``gradient_frames`` draws (encodes the frame index)."""
    return int(np.argmax(frame[:, :, 0].astype(int).sum(axis=0)))


@pytest.mark.parametrize(
    "codec,gop,bframes",
    [
        ("h264", 250, 0),
        ("h264", 12, 2),
        ("hevc", 30, 3),
        ("vp9", 20, None),
        ("mpeg4", 15, 0),
        ("mjpeg", None, None),
    ],
)
def test_seek_and_sequential_give_the_same_frames(tmp_path, codec, gop, bframes):
    path = make_video(tmp_path, "v", fps=30, duration=8, size=(96, 64), codec=codec, gop=gop, bframes=bframes)
    info = probe_video(path)
    assert info.total_frames == 240
    wanted = [0, 1, 50, 51, 120, 121, 200, 239]
    seq = read_frames(info, wanted, seek_min_skip=10**9)  # never seeks
    seek = read_frames(info, wanted, seek_min_skip=0)  # seeks at every gap
    np.testing.assert_array_equal(seq, seek)
    # and they really are the frames asked for: the bar moves right with the index
    expected = [int(95 * i / 239) for i in wanted]
    assert all(abs(_bar_position(f) - x) <= 2 for f, x in zip(seq, expected, strict=True))


def test_webm_without_frame_count_is_counted(tmp_path):
    path = make_video(tmp_path, "w", fps=20, duration=3, codec="vp9")
    with av.open(path) as c:
        assert c.streams.video[0].frames == 0  # the container does not say
    info = probe_video(path)
    assert info.total_frames == 60 and info.fps == pytest.approx(20)


def test_bframes_are_returned_in_presentation_order(tmp_path):
    path = make_video(tmp_path, "b", fps=25, duration=4, size=(64, 48), gop=50, bframes=3)
    info = probe_video(path)
    frames = read_frames(info, list(range(info.total_frames)))
    expected = [int(63 * i / (info.total_frames - 1)) for i in range(info.total_frames)]
    assert all(abs(_bar_position(f) - x) <= 2 for f, x in zip(frames, expected, strict=True))


def test_variable_frame_rate_indexes_every_frame(tmp_path):
    path = str(tmp_path / "vfr.mp4")
    # 40 frames whose durations alternate 1/30 s and 1/10 s
    with av.open(path, "w") as out:
        s = out.add_stream("libx264", rate=30)
        s.width, s.height, s.pix_fmt = 64, 48, "yuv420p"
        s.codec_context.time_base = Fraction(1, 30)
        t = 0
        for i in range(40):
            f = av.VideoFrame.from_ndarray(np.full((48, 64, 3), i * 6, np.uint8), format="rgb24")
            f.pts, f.time_base = t, Fraction(1, 30)
            t += 1 if i % 2 == 0 else 3
            for p in s.encode(f):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
    info = probe_video(path)
    assert info.total_frames == 40
    frames = read_frames(info, [0, 10, 39], seek_min_skip=0)
    means = [float(f.mean()) for f in frames]
    assert means[0] < means[1] < means[2]


@pytest.mark.parametrize(
    "rotation,expect_hw", [(90, (64, 48)), (-90, (64, 48)), (180, (48, 64)), (0, (48, 64))]
)
def test_rotation_metadata_is_applied(tmp_path, rotation, expect_hw):
    frame = np.zeros((48, 64, 3), np.uint8)
    frame[:8, :8] = 255  # a white corner block, top-left as stored
    path = str(tmp_path / f"rot{rotation}.mp4")
    encode_video(path, [frame] * 4, 10, rotation=rotation, crf=0)
    info = probe_video(path)
    out = read_frames(info, [0])[0]
    assert out.shape[:2] == expect_hw
    corner = {0: out[:8, :8], 180: out[-8:, -8:], 90: out[-8:, :8], -90: out[:8, -8:]}[rotation]
    assert corner.mean() > 200, "the stored top-left block must move where the display matrix says"
    assert sample_video(path, SamplingParams(factor=28, nframes=2)).meta["source_height"] == expect_hw[0]


@pytest.mark.parametrize(
    "content,reason",
    [
        (b"", "empty"),
        (b"this is not a video at all" * 50, "not a readable media file"),
    ],
)
def test_bad_files_raise_a_clear_error(tmp_path, content, reason):
    path = tmp_path / "bad.mp4"
    path.write_bytes(content)
    with pytest.raises(DecodeError, match=reason):
        probe_video(str(path))


def test_missing_file(tmp_path):
    with pytest.raises(DecodeError, match="not found"):
        probe_video(str(tmp_path / "nope.mp4"))


def test_audio_only_file_is_not_a_video(tmp_path):
    path = str(tmp_path / "tone.m4a")
    with av.open(path, "w") as out:
        s = out.add_stream("aac", rate=16000)
        for i in range(10):
            samples = (np.sin(np.arange(1024) / 10.0 + i) * 0.2).astype(np.float32)[None, :]
            f = av.AudioFrame.from_ndarray(samples, format="fltp", layout="mono")
            f.sample_rate, f.pts = 16000, i * 1024
            for p in s.encode(f):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
    with pytest.raises(DecodeError, match="no video stream"):
        probe_video(path)


def test_truncated_avi_is_reported_unless_allowed(tmp_path):
    path = make_video(tmp_path, "t", fps=30, duration=4, codec="mpeg4")
    data = open(path, "rb").read()
    cut = tmp_path / "cut.avi"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(DecodeError, match="truncated file") as e:
        sample_video(str(cut), SamplingParams(factor=28, fps=2))
    assert str(cut) in str(e.value) and "of 120 declared frames" in str(e.value)
    info = probe_video(str(cut), allow_truncated=True)
    assert info.truncated and info.total_frames < 120


def test_deadline_stops_a_long_decode(tmp_path):
    path = make_video(tmp_path, "long", fps=30, duration=20, size=(320, 240))
    info = probe_video(path)
    t0 = time.monotonic()
    with pytest.raises(DecodeError, match="time limit"):
        read_frames(info, list(range(0, info.total_frames, 3)), deadline=time.monotonic() + 0.05)
    assert time.monotonic() - t0 < 2.0


def test_clip_window_samples_inside_the_window(small_video):
    full = sample_video(small_video, SamplingParams(factor=28, fps=2))
    clip = sample_video(small_video, SamplingParams(factor=28, fps=2, video_start=1.0, video_end=2.0))
    assert full.meta["total_frames"] == clip.meta["total_frames"] == 90
    assert all(30 <= i <= 60 for i in clip.meta["frame_indices"])
    with pytest.raises(DecodeError, match="clip window"):
        sample_video(small_video, SamplingParams(factor=28, video_start=5.0, video_end=6.0))


def test_tiny_pixel_budget_keeps_at_least_one_patch(small_video):
    # qwen-vl-utils floors the short side to 0 here and crashes; we keep a factor-sized side
    v = sample_video(small_video, SamplingParams(factor=32, nframes=2, min_pixels=1024, max_pixels=1024))
    assert v.frames.shape[1] >= 32 and v.frames.shape[2] >= 32
