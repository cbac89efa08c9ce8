"""Issue 21 items 7 and 10: which video stream is decoded, and how its frames become RGB.

The reference is the ``ffmpeg`` command line (imageio-ffmpeg's static binary, a test extra):
``ffmpeg -i f -pix_fmt rgb24 -f rawvideo -``. Clips are made here: PyAV encodes the videos, the
binary muxes cover art (PyAV cannot write an attached picture).
"""

from __future__ import annotations

import importlib.util
import struct
import subprocess
import sys
from pathlib import Path

import av
import imageio_ffmpeg  # the test extra's ffmpeg command line: the reference
import numpy as np
import pytest

from easyvideor1.media.decode import DecodeError, probe_video, read_frames, set_decode_threads
from easyvideor1.media.sampling import SamplingParams
from easyvideor1.media.video import sample_video

FFMPEG = imageio_ffmpeg.get_ffmpeg_exe()


def ffmpeg(*args: str) -> bytes:
    return subprocess.run([FFMPEG, "-v", "error", "-y", *args], capture_output=True, check=True).stdout


def cli_rgb(path: str, width: int, height: int, stream: int | None = None) -> np.ndarray:
    """All frames of ``stream`` (default: the one the command line picks), as it converts them to RGB."""
    pick = ["-map", f"0:{stream}"] if stream is not None else []
    raw = ffmpeg("-i", path, *pick, "-pix_fmt", "rgb24", "-f", "rawvideo", "-")
    return np.frombuffer(raw, np.uint8).reshape(-1, height, width, 3)


def colour_blocks(n: int, height: int, width: int) -> list[np.ndarray]:
    """Saturated random colour blocks: every block border is a sharp chroma edge, at even and odd
    columns (the pattern moves 3 pixels a frame)."""
    rng = np.random.default_rng(7)
    cells = rng.integers(0, 256, (height // 8 + 1, width // 8 + 1, 3)).astype(np.uint8)
    base = np.repeat(np.repeat(cells, 8, 0), 8, 1)[:height, :width]
    return [np.roll(base, 3 * i, axis=1) for i in range(n)]


def encode(path: Path, frames: list[np.ndarray], pix_fmt: str, codec: str = "libx264") -> str:
    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=10)
        stream.height, stream.width = frames[0].shape[:2]
        stream.pix_fmt = pix_fmt
        if codec == "libx264":
            stream.options = {"crf": "12", "preset": "ultrafast"}
        for f in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(f, format="rgb24")):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return str(path)


def abs_diff(a: np.ndarray, b: np.ndarray) -> tuple[float, int]:
    assert a.shape == b.shape, f"{a.shape} != {b.shape}"
    d = np.abs(a.astype(np.int16) - b.astype(np.int16))
    return float(d.mean()), int(d.max())


def ours(path: str) -> np.ndarray:
    info = probe_video(path)
    return read_frames(info, list(range(info.total_frames)))


# ---------------------------------------------------------------- colour conversion (item 10)

# Subsampled chroma in a format swscale converts on its scaled path: PyAV's plain conversion differed
# from the command line here (measured before the fix: mean 5.5 / 4.5 / 4.4, max 91 / 83 / 37).
DIFFERING = [
    ("yuv420p10le", "libx264", "mp4"),
    ("yuv422p10le", "libx264", "mp4"),
    ("nv12", "rawvideo", "mkv"),
]
# 8-bit planar YUV takes swscale's unscaled path: identical to the command line before and after, and
# it must stay identical to the plain PyAV conversion (qwen-vl-utils parity rests on it). 4:4:4 has no
# chroma to place, so 10-bit 4:4:4 matched before too.
UNCHANGED = [
    ("yuv420p", "libx264", "mp4"),
    ("yuv422p", "libx264", "mp4"),
    ("yuv444p", "libx264", "mp4"),
    ("yuv444p10le", "libx264", "mp4"),
]


@pytest.mark.parametrize("pix_fmt,codec,ext", DIFFERING, ids=[c[0] for c in DIFFERING])
def test_high_bit_depth_and_semi_planar_rgb_matches_the_ffmpeg_command_line(tmp_path, pix_fmt, codec, ext):
    path = encode(tmp_path / f"{pix_fmt}.{ext}", colour_blocks(6, 96, 128), pix_fmt, codec)
    with av.open(path) as c:
        assert c.streams.video[0].codec_context.pix_fmt == pix_fmt
        plain = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])  # the old path
    reference = cli_rgb(path, 128, 96)
    mean, worst = abs_diff(ours(path), reference)
    assert mean < 1.0, f"{pix_fmt}: mean abs difference {mean:.3f} (max {worst}) from ffmpeg's RGB"
    # the clip is one where the difference shows: PyAV's plain conversion fails the same bound
    assert abs_diff(plain, reference)[0] > 1.0


@pytest.mark.parametrize("pix_fmt,codec,ext", UNCHANGED, ids=[c[0] for c in UNCHANGED])
def test_planar_8_bit_and_444_rgb_is_unchanged_and_matches_the_command_line(tmp_path, pix_fmt, codec, ext):
    path = encode(tmp_path / f"{pix_fmt}.{ext}", colour_blocks(6, 96, 128), pix_fmt, codec)
    with av.open(path) as c:
        plain = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])
    got = ours(path)
    np.testing.assert_array_equal(got, plain)
    mean, worst = abs_diff(got, cli_rgb(path, 128, 96))
    assert mean < 1.0, f"{pix_fmt}: mean abs difference {mean:.3f} (max {worst}) from ffmpeg's RGB"


def test_tagged_colour_matrix_and_full_range_follow_the_stream(tmp_path):
    """BT.709 limited and BT.601 full-range 10-bit clips (tags written by the command line): the
    matrix and range are the stream's, as in ffmpeg's own conversion."""
    src = encode(tmp_path / "src.mp4", colour_blocks(4, 96, 128), "yuv444p", "libx264")
    for name, tags in (
        ("bt709", ["-colorspace", "bt709", "-color_primaries", "bt709", "-color_trc", "bt709"]),
        ("full", ["-color_range", "pc"]),
    ):
        path = str(tmp_path / f"{name}.mp4")
        ffmpeg("-i", src, "-vf", "format=yuv420p10le", "-c:v", "libx264", "-crf", "12", *tags, path)
        mean, worst = abs_diff(ours(path), cli_rgb(path, 128, 96))
        assert mean < 1.0, f"{name}: mean abs difference {mean:.3f} (max {worst}) from ffmpeg's RGB"


def test_one_scaler_thread_gives_the_command_lines_pixels_too(tmp_path):
    path = encode(tmp_path / "ten.mp4", colour_blocks(4, 96, 128), "yuv420p10le")
    many = ours(path)
    set_decode_threads(1)  # what worker processes use
    try:
        one = ours(path)
    finally:
        set_decode_threads(0)
    np.testing.assert_array_equal(one, many)
    mean, worst = abs_diff(one, cli_rgb(path, 128, 96))
    assert mean < 1.0, f"one thread: mean abs difference {mean:.3f} (max {worst}) from ffmpeg's RGB"


# ---------------------------------------------------------------- stream choice (item 7)


def _boxes(data: bytes, start: int, end: int):
    while start < end:
        size, kind = struct.unpack(">I4s", data[start : start + 8])
        yield start, size, kind
        start += size


def udta_first(path: str) -> None:
    """Move the MP4's ``udta`` box (cover art lives there) before its tracks inside ``moov``.

    The MP4 demuxer creates streams in box order, so the cover becomes stream 0, as in files written
    by taggers that put metadata first. Same bytes, same sizes: no offset changes."""
    data = bytearray(Path(path).read_bytes())
    for pos, size, kind in _boxes(bytes(data), 0, len(data)):
        if kind == b"moov":
            kids = list(_boxes(bytes(data), pos + 8, pos + size))
            order = sorted(kids, key=lambda k: {b"mvhd": 0, b"udta": 1}.get(k[2], 2))
            assert [k[2] for k in order][:2] == [b"mvhd", b"udta"], [k[2] for k in kids]
            data[pos + 8 : pos + size] = b"".join(bytes(data[p : p + s]) for p, s, _ in order)
    Path(path).write_bytes(bytes(data))


@pytest.fixture(scope="module")
def clip_and_cover(tmp_path_factory):
    d = tmp_path_factory.mktemp("covers")
    video = encode(d / "video.mp4", colour_blocks(30, 64, 96), "yuv420p")
    cover = str(d / "cover.png")
    av.VideoFrame.from_ndarray(np.full((80, 80, 3), (200, 30, 30), np.uint8), format="rgb24").save(cover)
    return d, video, cover


def cover_first(d, video: str, cover: str, name: str) -> str:
    """An mp4 whose first video stream is ``cover`` as an attached picture, then ``video``'s track."""
    path = str(d / name)
    ffmpeg("-i", cover, "-i", video, "-map", "0", "-map", "1", "-c", "copy",
           "-disposition:v:0", "attached_pic", path)  # fmt: skip
    udta_first(path)
    return path


def test_mp4_whose_first_video_stream_is_cover_art_decodes_the_video_track(clip_and_cover):
    d, video, cover = clip_and_cover
    path = cover_first(d, video, cover, "cover_first.mp4")
    with av.open(path) as c:
        first = c.streams.video[0]
        assert first.codec_context.name == "png" and first.disposition & av.stream.Disposition.attached_pic
    info = probe_video(path)
    assert (info.stream, info.codec, info.total_frames, info.width) == (1, "h264", 30, 96)
    np.testing.assert_array_equal(ours(path), cli_rgb(path, 96, 64))  # the command line's pick
    got = sample_video(path, SamplingParams(fps=2.0))
    assert got.meta["video_stream"] == 1 and got.meta["total_frames"] == 30


def test_mkv_whose_first_track_is_a_still_picture_picks_the_track_with_frames(clip_and_cover):
    """A one-frame PNG track first and no default flag on either: ``av_find_best_stream`` (decord's
    choice) ranks by frames seen while probing (capped at 5), so the moving track wins. (The command
    line's own automatic choice is the largest picture, here the 80x80 still: not what a video
    reader wants, and not what qwen-vl-utils reads.)"""
    d, video, cover = clip_and_cover
    path = str(d / "still_first.mkv")
    ffmpeg("-i", cover, "-i", video, "-map", "0", "-map", "1", "-c", "copy",
           "-disposition:v:0", "0", "-disposition:v:1", "0", path)  # fmt: skip
    with av.open(path) as c:
        assert [s.codec_context.name for s in c.streams.video] == ["png", "h264"]
        assert not any(s.disposition for s in c.streams.video)  # neither flagged: frame counts decide
    info = probe_video(path)
    assert (info.stream, info.codec, info.total_frames) == (1, "h264", 30)
    np.testing.assert_array_equal(ours(path), cli_rgb(path, 96, 64, stream=1))


@pytest.mark.parametrize("layout", ["cover_first.mp4", "still_first.mkv"])
def test_decord_picks_the_same_stream(clip_and_cover, tmp_path, layout):
    """qwen-vl-utils' reader (decord, in its own process: see qwen_reference_worker.py)."""
    if importlib.util.find_spec("decord") is None:
        pytest.fail("decord (test extra) is not installed")
    d, video, cover = clip_and_cover
    path = str(tmp_path / layout)
    flags = (
        ["-disposition:v:0", "attached_pic"]
        if layout.endswith(".mp4")
        else ["-disposition:v:0", "0", "-disposition:v:1", "0"]
    )
    ffmpeg("-i", cover, "-i", video, "-map", "0", "-map", "1", "-c", "copy", *flags, path)
    if layout.endswith(".mp4"):
        udta_first(path)
    with av.open(path) as c:
        assert c.streams[0].codec_context.name == "png"  # the picture comes first
    out = tmp_path / "decord.npy"
    code = f"import decord, numpy; v = decord.VideoReader({path!r}); numpy.save({str(out)!r}, v.get_batch(list(range(len(v)))).asnumpy())"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
    np.testing.assert_array_equal(ours(path), np.load(out))


def test_file_with_only_cover_art_is_reported_as_such(clip_and_cover):
    d, _, cover = clip_and_cover
    path = str(d / "song.mp4")
    ffmpeg("-f", "lavfi", "-i", "sine=duration=1", "-i", cover, "-map", "0", "-map", "1", "-c:a", "aac",
           "-c:v", "copy", "-disposition:v:0", "attached_pic", path)  # fmt: skip
    with pytest.raises(
        DecodeError, match=r"song\.mp4: no video track, only still pictures \(cover art: stream #1 png\)"
    ):
        probe_video(path)


def test_cache_entry_names_the_stream(clip_and_cover, tmp_path):
    """The frames' identity includes the stream they come from: the entry says which."""
    from easyvideor1.media.cache import entry_key, entry_path, read_entry, write_entry

    d, video, cover = clip_and_cover
    path = cover_first(d, video, cover, "cover_first_cache.mp4")
    params = SamplingParams(fps=2.0)
    built = sample_video(path, params)
    entry = entry_path(tmp_path, entry_key(path, params))
    write_entry(entry, built)
    read = read_entry(entry)
    assert (read.meta["video_stream"], read.meta["codec"]) == (1, "h264")
    np.testing.assert_array_equal(read.frames.numpy(), built.frames.numpy())


FORK_AFTER_CONVERTING = """
import multiprocessing, threading
from concurrent.futures import ProcessPoolExecutor
import av, numpy as np
from easyvideor1.media.rgb import to_rgb24
rgb = np.random.default_rng(0).integers(0, 255, (360, 640, 3), dtype=np.uint8)
to_rgb24(av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(format="yuv420p10le"))  # a graph here
def fork_from_a_thread():  # as the pipeline's loader thread starts its process pool
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        assert pool.submit(abs, -3).result(timeout=60) == 3
t = threading.Thread(target=fork_from_a_thread)
t.start()
t.join()
print("forked")
"""


def test_a_fork_from_another_thread_after_converting_does_not_hang():
    """Found running the media and curation tests in one process: the parent converted 10-bit frames
    (a filter graph with scaler threads) on its main thread, then the pipeline's loader thread
    forked its pool; the child freed the main thread's graphs and waited for ever on scaler threads
    that do not exist in a child. Graphs a child inherits are now kept, never freed."""
    done = subprocess.run(
        [sys.executable, "-c", FORK_AFTER_CONVERTING], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "forked", done.stderr[-2000:]
