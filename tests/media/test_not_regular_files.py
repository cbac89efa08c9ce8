"""Issue 21 item 2: a media path that is not a regular file is refused before anything opens it.

Opening a named pipe blocks until a writer appears, and reading a character device such as
``/dev/zero`` never ends; before the fix ``preprocess`` hashed the path in the parent (no worker, no
time limit) and hung for ever. Every reader now ``stat``s first (``media.failures.regular_file``):
the record fails with ``<path>: not a regular file (...)`` and the batch goes on.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import threading

import pytest
from PIL import Image

from easyvideor1.data.config import DataConfig
from easyvideor1.data.dataset import RecordDataset, load_media
from easyvideor1.data.records import load_records
from easyvideor1.media.cache import VideoLoader
from easyvideor1.media.failures import MediaFailure, not_regular, regular_file
from tests.conftest import make_video

CFG = DataConfig(
    model_family="qwen3vl", video_fps=None, video_nframes=2, video_min_pixels=1024, video_max_pixels=1024
)
DEADLINE_S = 30  # a blocked open never returns: anything slower than this is the hang


def _within_deadline(fn):
    """``fn()``'s result or exception; fails the test when ``fn`` is still blocked after the deadline
    (the daemon thread is then abandoned: it cannot hold up the test run's exit)."""
    out: dict = {}

    def target():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed back to the test thread
            out["error"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(DEADLINE_S)
    assert not t.is_alive(), f"still blocked after {DEADLINE_S} s (opened a non-regular file)"
    return out


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    d = tmp_path_factory.mktemp("odd")
    make_video(d, "good", fps=4, duration=1.0, size=(32, 32))
    os.mkfifo(d / "pipe.mp4")
    os.mkfifo(d / "pipe.png")
    os.symlink("/dev/zero", d / "zero.mp4")
    (d / "folder.mp4").mkdir()
    Image.new("RGB", (32, 32), (0, 200, 0)).save(d / "green.png")
    return d


def test_the_kinds_are_named():
    assert not_regular(os.stat("/dev/null").st_mode) == "not a regular file (a character device)"
    assert not_regular(os.stat("/").st_mode) == "not a regular file (a directory)"
    with pytest.raises(MediaFailure) as e:
        regular_file("/dev/null", name="clip.mp4")
    assert str(e.value) == "clip.mp4: not a regular file (a character device)"


def test_preprocess_reports_pipes_and_devices_and_builds_the_rest(odd):
    rows = [
        {"problem_id": name, "problem": "q", "answer": "a", "videos": [str(odd / name)]}
        for name in ("pipe.mp4", "zero.mp4", "folder.mp4", "good.mp4")
    ]
    (odd / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cache = odd / "cache"
    cmd = [sys.executable, "-m", "easyvideor1", "preprocess", "--data", str(odd / "data.jsonl")]
    cmd += ["--cache-dir", str(cache), "--quiet", "--model-family", "qwen3vl", "--nframes", "2"]
    cmd += ["--min-pixels", "1024", "--max-pixels", "1024"]
    # the hang was in the parent, before any worker or time limit: a timeout here is the bug
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "1 built" in done.stdout and "3 failed" in done.stdout, done.stdout
    reasons = {f["record"]: f["reason"] for f in map(json.loads, open(cache / "failures.jsonl"))}
    assert reasons == {
        "pipe.mp4": "not a regular file (a named pipe (FIFO))",
        "zero.mp4": "not a regular file (a character device)",
        "folder.mp4": "not a regular file (a directory)",
    }


@pytest.mark.parametrize("with_cache", [False, True], ids=["decode", "cache-lookup"])
def test_loading_a_pipe_fails_the_record_instead_of_blocking(odd, tmp_path, with_cache):
    rows = [
        {"problem_id": "v", "problem": "q", "answer": "A", "videos": ["pipe.mp4"]},
        {"problem_id": "i", "problem": "q", "answer": "A", "images": ["pipe.png"]},
        {"problem_id": "z", "problem": "q", "answer": "A", "videos": ["zero.mp4"]},
        {"problem_id": "ok", "problem": "q", "answer": "A", "images": ["green.png"]},
    ]
    path = odd / f"records-{with_cache}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = CFG
    loader = None
    if with_cache:  # eval with a frame cache looks the source up by its identity first
        cfg = dataclasses.replace(CFG, cache_dir=str(tmp_path / "cache"))
        loader = VideoLoader(cfg.cache_dir, mode="prefer_cache")
    ds = RecordDataset(load_records(str(path)), cfg, str(path), loader)
    expected = [
        "pipe.mp4: not a regular file (a named pipe (FIFO))",
        "pipe.png: not a regular file (a named pipe (FIFO))",
        "zero.mp4: not a regular file (a character device)",
    ]
    for i, reason in enumerate(expected):
        out = _within_deadline(lambda i=i: load_media(ds[i], ds.cfg, ds.loader))
        assert isinstance(out.get("error"), MediaFailure), out
        assert out["error"].reason == reason
    assert isinstance(
        _within_deadline(lambda: load_media(ds[3], ds.cfg, ds.loader))["value"][1][0], Image.Image
    )
