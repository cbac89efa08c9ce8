"""``demo --tools``: its task hides the answer from the first view and shows it through ``seek``;
the probes it reports (refused calls, the hit rate of call windows); a short real run."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from easyvideor1.data.records import load_records
from easyvideor1.data.synthetic import COLOURS, OPTION_LETTERS, tool_demo_windows, write_tool_demo_set
from easyvideor1.demo import REFUSED, run_tool_demo, window_hit_rate
from easyvideor1.media.video import sample_video
from easyvideor1.models.families import get_family
from easyvideor1.tools.config import ToolsConfig
from easyvideor1.tools.session import ToolSession
from easyvideor1.tools.tracks import track_params


def _square_colour(frame: np.ndarray) -> str:
    """The palette colour nearest the frame's brightest-saturated pixels (the square)."""
    pixels = frame.reshape(-1, 3).astype(float)
    sat = pixels.max(1) - pixels.min(1)
    square = pixels[sat >= np.quantile(sat, 0.75)].mean(0)
    return min(COLOURS, key=lambda c: float(((np.array(COLOURS[c]) - square) ** 2).sum()))


def test_the_window_is_never_in_the_first_view_and_always_in_seek(tmp_path):
    assert tool_demo_windows(12, 4.0, 4) == [1, 2, 5, 6, 8, 9, 10]  # first view: frames 0, 16, 31, 47
    train, _ = write_tool_demo_set(str(tmp_path), n_train=12, n_val=1)
    first = get_family("qwen3_vl").frames.params(nframes=4, min_pixels=1024, max_pixels=1024)
    seek = track_params(ToolsConfig(names=["seek"], seek_max_pixels=4096), "seek", "qwen3_vl")
    distractor_differs = 0
    for rec in load_records(train):
        path = os.path.join(str(tmp_path), rec.videos[0])
        asked = list(COLOURS)[OPTION_LETTERS.index(rec.answer)]
        lo, hi = rec.extra["window"]
        assert rec.problem.endswith(f"between {lo} s and {hi} s?")
        coarse = sample_video(path, first).frames.numpy()  # [T, H, W, C] uint8
        shown = {_square_colour(f) for f in coarse}
        assert len(shown) == 1  # one distractor colour before and after the window
        distractor_differs += shown != {asked}
        track = sample_video(path, seek)
        times = track.meta["frame_times"]
        inside = [i for i, t in enumerate(times) if lo <= t <= hi]
        frames = track.frames.numpy()
        assert len(inside) == 5 and {_square_colour(frames[i]) for i in inside} == {asked}
        call = json.loads(rec.offline_turns[0].split("\n")[1])
        assert call == {"name": "seek", "arguments": {"start_s": lo, "end_s": hi}}
        assert rec.offline_turns[1] == f"<answer>{rec.answer}</answer>"
    assert distractor_differs >= 6  # the distractor is drawn independently: mostly another colour


def test_a_session_that_refuses_answers_every_call_with_an_error_and_serves_nothing(tmp_path):
    train, _ = write_tool_demo_set(str(tmp_path), n_train=1, n_val=1)
    rec = load_records(train)[0]
    session = ToolSession(ToolsConfig(names=["seek"]), "qwen3_vl", refuse=REFUSED)
    episode = session.episode(rec, [os.path.join(str(tmp_path), rec.videos[0])])
    (out,) = episode.run_turn(['{"name": "seek", "arguments": {"start_s": 1, "end_s": 2}}'])
    assert out.status == "error" and out.result.text == f"error: {REFUSED}"
    assert out.result.frames == 0


def test_window_hit_rate_by_hand():
    rows = [
        {"calls": [{"status": "ok", "arguments": {"start_s": 5, "end_s": 6}}]},  # the window
        {"calls": [{"status": "ok", "arguments": {"start_s": 0, "end_s": 1.5}}]},  # meets [1, 2]
        {"calls": [{"status": "ok", "arguments": {"start_s": 3, "end_s": 4}}]},  # misses [8, 9]
        {"calls": [{"status": "invalid", "arguments": {"start_s": 8, "end_s": 9}}]},  # not run
        {"calls": [{"status": "ok", "arguments": {"time_s": 2.5}}]},  # frame_at inside [2, 3]
        {},  # no call: not counted
    ]
    windows = [[5, 6], [1, 2], [8, 9], [8, 9], [2, 3], [1, 2]]
    assert window_hit_rate(rows, windows) == pytest.approx(3 / 5)
    assert window_hit_rate([{}], [[1, 2]]) == 0.0


@pytest.mark.slow
def test_a_short_tool_demo_writes_its_report_and_plot(tmp_path):
    out = str(tmp_path / "demo_tools")
    quick = [
        "trainer.sft_warmup_steps=2",
        "trainer.max_steps=1",
        "trainer.val_every=0",
        "trainer.prompts_per_step=2",
        "trainer.mini_batch_prompts=2",
        "rollout.n=2",
        "trainer.sft_batch_size=4",
    ]
    r = run_tool_demo(out, quick, n_train=8, n_val=4)
    saved = json.load(open(os.path.join(out, "report.json")))
    assert saved["accuracy_with_tools"] == r["accuracy_with_tools"]
    for key in (
        "accuracy_with_tools",
        "tool_call_rate",
        "accuracy_without_tools",
        "window_hit_rate",
        "accuracy_tools_refused",
        "answer_rate_without_tools",
    ):
        assert 0.0 <= saved[key] <= 1.0, key
    assert saved["held_out"] == 4 and saved["steps"] == 1
    assert os.path.getsize(os.path.join(out, "reward_curve.png")) > 1000
    assert os.path.exists(os.path.join(out, "cache", "manifest.jsonl")) or os.listdir(
        os.path.join(out, "cache")
    )
