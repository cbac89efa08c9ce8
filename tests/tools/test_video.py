"""The built-in video tools on a real encoded video: the frames they return are the right ones, at
the right times, the same from a cached track as decoded, within the budgets."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from easyvideor1.media.cache import VideoLoader, entry_key, entry_path, write_entry
from easyvideor1.media.identity import source_identity
from easyvideor1.media.video import sample_video
from easyvideor1.tools import ToolError, ToolsConfig, get_tool
from easyvideor1.tools.session import ToolSession
from easyvideor1.tools.tracks import track_params

from ..conftest import COUNTING_FPS as FPS
from ..conftest import COUNTING_SECONDS as SECONDS

SETTINGS = ToolsConfig(names=["seek", "frame_at", "zoom"], seek_fps=4.0, seek_max_pixels=64 * 64)


def _ctx(counting_video, loader=None, max_frames=8, settings=SETTINGS):
    return ToolSession(settings, "qwen3_vl", loader).context({"id": "r"}, [counting_video], max_frames)


def _source_index(frame: torch.Tensor) -> int:
    """Which source frame a returned frame is (its right half's grey level)."""
    grey = float(frame[:, frame.shape[1] * 3 // 4 :, 1].float().mean())
    return round((grey - 20) / 3)


def test_seek_returns_evenly_spread_frames_of_the_window_with_their_source_times(counting_video):
    result = get_tool("seek").function(_ctx(counting_video), {"start_s": 2.0, "end_s": 4.0, "num_frames": 4})
    (clip,) = result.videos
    assert clip.frames.shape[0] == 4 and clip.frames.dtype == torch.uint8
    times = clip.meta["frame_times"]
    assert times[0] >= 2.0 and times[-1] <= 4.0 and times == sorted(times)
    # the seek track samples 4 fps of a 10 fps source: frames 20, 22/23, ... 40 are in the window
    for frame, index in zip(clip.frames, clip.meta["frame_indices"], strict=True):
        assert _source_index(frame) == index
    meta = clip.processor_metadata()
    assert meta["fps"] == FPS and meta["frames_indices"] == clip.meta["frame_indices"]
    assert result.text == f"4 frames from {times[0]:.2f} s to {times[-1]:.2f} s."


def test_seek_caps_frames_by_the_call_budget_and_keeps_pairs(counting_video):
    ctx = _ctx(counting_video, max_frames=5)
    (clip,) = get_tool("seek").function(ctx, {"start_s": 0.0, "end_s": 6.0, "num_frames": 50}).videos
    assert clip.frames.shape[0] == 4  # 5 allowed -> an even 4
    # a window narrower than the track spacing still gives a (repeated) pair
    (clip,) = get_tool("seek").function(ctx, {"start_s": 1.01, "end_s": 1.02, "num_frames": 2}).videos
    assert clip.frames.shape[0] == 2


@pytest.mark.parametrize(
    "args,message",
    [
        ({"start_s": -1.0, "end_s": 2.0}, "outside the video"),
        ({"start_s": 7.0, "end_s": 8.0}, "outside the video"),
        ({"start_s": 3.0, "end_s": 2.0}, "must be after"),
        ({"start_s": 1.0, "end_s": float("nan")}, r"end_s \(nan\) must be after"),
        ({"start_s": 1.0, "end_s": 2.0, "num_frames": 0}, "num_frames must be >= 1"),
    ],
)
def test_seek_refuses_windows_it_cannot_serve(counting_video, args, message):
    with pytest.raises(ToolError, match=message):
        get_tool("seek").function(_ctx(counting_video), args)


def test_frame_at_and_zoom_come_from_the_detail_track(counting_video):
    ctx = _ctx(counting_video)
    (image,) = get_tool("frame_at").function(ctx, {"time_s": 3.0}).images
    frame = torch.from_numpy(np.array(image))
    # the detail track (1 fps over 6 s: source frames 0, 12, 24, 35, 47, 59) is nearest at frame 35
    assert (
        _source_index(frame) == 35
        and get_tool("frame_at").function(ctx, {"time_s": 3.0}).text == "Frame at 3.50 s."
    )
    assert image.width * image.height <= SETTINGS.image_max_pixels and image.width % 32 == 0
    # the right half of the frame is grey, the left half red: a crop of the right half has no red
    (crop,) = get_tool("zoom").function(ctx, {"time_s": 3.0, "box": [600, 0, 700, 1000]}).images
    pixels = torch.from_numpy(np.array(crop)).float()
    assert abs(pixels[..., 0].mean() - pixels[..., 1].mean()) < 8
    assert crop.height > crop.width  # 16 x 96 pixels of a 160x96 frame, enlarged to the image floor
    (left,) = get_tool("zoom").function(ctx, {"time_s": 3.0, "box": [0, 0, 400, 1000]}).images
    assert torch.from_numpy(np.array(left)).float()[..., 0].mean() > 200
    for box in ([0, 0, 2000, 100], [500, 0, 400, 100], [0, 0, 1e12, 1e12]):
        with pytest.raises(ToolError, match="box must satisfy"):
            get_tool("zoom").function(ctx, {"time_s": 1.0, "box": box})
    with pytest.raises(ToolError, match="outside the video"):
        get_tool("frame_at").function(ctx, {"time_s": SECONDS + 1.0})


def test_a_cached_track_serves_the_same_frames_as_decoding_and_is_counted(counting_video, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    for kind in ("seek", "detail"):  # what preprocess writes when tools are on
        params = track_params(SETTINGS, kind, "qwen3_vl")
        write_entry(
            entry_path(cache, entry_key(counting_video, params, source_identity(counting_video))),
            sample_video(counting_video, params),
        )
    loader = VideoLoader(str(cache), "prefer_cache")
    args = {"start_s": 0.5, "end_s": 5.5, "num_frames": 6}
    cached = get_tool("seek").function(_ctx(counting_video, loader), args).videos[0]
    decoded = get_tool("seek").function(_ctx(counting_video), args).videos[0]
    assert loader.stats.hits == 1 and loader.stats.decoded == 0
    assert cached.meta["frame_indices"] == decoded.meta["frame_indices"]
    assert torch.equal(cached.frames, decoded.frames)
    a = (
        get_tool("zoom")
        .function(_ctx(counting_video, loader), {"time_s": 2.2, "box": [100, 100, 700, 700]})
        .images[0]
    )
    b = (
        get_tool("zoom")
        .function(_ctx(counting_video), {"time_s": 2.2, "box": [100, 100, 700, 700]})
        .images[0]
    )
    assert a.tobytes() == b.tobytes()
    assert cached.frames.shape[1] * cached.frames.shape[2] <= 64 * 64


def test_preprocess_writes_the_tracks_the_configured_tools_read(counting_video, tmp_path):
    import json
    import subprocess
    import sys

    records = tmp_path / "records.jsonl"
    row = {"problem": "What?", "answer": "A", "problem_type": "multiple choice", "options": ["A. a", "B. b"]}
    records.write_text(json.dumps({**row, "problem_id": "p0", "videos": [counting_video]}) + "\n")
    cache = tmp_path / "cache"
    r = subprocess.run(
        [
            sys.executable, "-m", "easyvideor1", "preprocess", "--data", str(records), "--cache-dir", str(cache),
            "--model-family", "qwen3vl", "--nframes", "4", "--min-pixels", "1024", "--max-pixels", "4096",
            "--quiet", "tools.names=[seek,zoom]", "tools.seek_max_pixels=4096",
        ],
        capture_output=True,
        text=True,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((cache / "report.json").read_text())
    assert (
        report["videos"] == 3 and report["built"] == 3 and report["tool_tracks"] == 2
    )  # first view + 2 tracks
    settings = ToolsConfig(names=["seek", "zoom"], seek_max_pixels=4096)
    loader = VideoLoader(str(cache), "cache_only")
    ctx = _ctx(counting_video, loader, settings=settings)
    get_tool("seek").function(ctx, {"start_s": 1.0, "end_s": 2.0})
    get_tool("zoom").function(ctx, {"time_s": 1.0, "box": [0, 0, 500, 500]})
    assert loader.stats.hits == 2 and loader.stats.decoded == 0  # every frame from the cache


def test_a_missing_track_in_cache_only_mode_is_a_tool_error_not_a_decode(counting_video, tmp_path):
    from easyvideor1.tools.calls import ERROR

    (tmp_path / "empty").mkdir()
    settings = ToolsConfig(names=["seek"])
    session = ToolSession(settings, "qwen3_vl", VideoLoader(str(tmp_path / "empty"), "cache_only"))
    (outcome,) = session.episode({}, [counting_video]).run_turn(
        ['{"name": "seek", "arguments": {"start_s": 1, "end_s": 2}}']
    )
    assert (
        outcome.status == ERROR and "no seek track in the frame cache (cache_only mode" in outcome.result.text
    )
    assert session.loader.stats.decoded == 0
