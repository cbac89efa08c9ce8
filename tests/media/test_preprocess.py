"""The preprocess job: bad input, crash safety, resume, invalidation, shards, time limits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import av
import numpy as np
import pytest

from easyvideor1.data.config import DataConfig
from easyvideor1.data.preprocess import preprocess
from easyvideor1.media.cache import read_entry, read_header
from easyvideor1.media.workers import run_tasks
from tests.conftest import make_video

CFG = DataConfig(
    model_family="qwen3vl", video_fps=2.0, video_min_pixels=4 * 32 * 32, video_max_pixels=64 * 32 * 32
)


def _write_jsonl(path: Path, rows: list) -> str:
    with open(path, "w") as f:
        for r in rows:
            f.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return str(path)


def _audio_only(path: str) -> str:
    with av.open(path, "w") as out:
        s = out.add_stream("aac", rate=16000)
        for i in range(5):
            f = av.AudioFrame.from_ndarray(np.zeros((1, 1024), np.float32), format="fltp", layout="mono")
            f.sample_rate, f.pts = 16000, i * 1024
            for p in s.encode(f):
                out.mux(p)
        for p in s.encode():
            out.mux(p)
    return path


def _entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("*/*.safetensors"))


def test_bad_input_is_reported_and_good_videos_are_built(tmp_path):
    good = [make_video(tmp_path, f"good{i}", fps=10, duration=2) for i in range(3)]
    corrupt = tmp_path / "corrupt.mp4"
    corrupt.write_bytes(os.urandom(20000))
    truncated = tmp_path / "truncated.mp4"
    truncated.write_bytes(Path(good[0]).read_bytes()[:300])
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    text = tmp_path / "notes.mp4"
    text.write_text("just some text\n" * 100)
    audio = _audio_only(str(tmp_path / "audio.m4a"))
    image = tmp_path / "img.png"
    from PIL import Image

    Image.new("RGB", (32, 32), "red").save(image)
    rows = [{"problem_id": f"g{i}", "problem": "q", "answer": "a", "videos": [p]} for i, p in enumerate(good)]
    rows += [
        {"problem_id": "dup", "problem": "same video again", "answer": "a", "videos": [good[0]]},
        {"problem_id": "corrupt", "problem": "q", "answer": "a", "videos": [str(corrupt)]},
        {"problem_id": "truncated", "problem": "q", "answer": "a", "videos": [str(truncated)]},
        {"problem_id": "empty", "problem": "q", "answer": "a", "videos": [str(empty)]},
        {"problem_id": "missing", "problem": "q", "answer": "a", "videos": [str(tmp_path / "nope.mp4")]},
        {"problem_id": "text", "problem": "q", "answer": "a", "videos": [str(text)]},
        {"problem_id": "audio", "problem": "q", "answer": "a", "videos": [audio]},
        {"problem_id": "image-as-video", "problem": "q", "answer": "a", "videos": [str(image)]},
        {"problem_id": "image-record", "problem": "q", "answer": "a", "images": [str(image)]},
        {"problem_id": "text-record", "problem": "what is 2+2?", "answer": "4"},
        {"problem_id": "bad-videos", "problem": "q", "answer": "a", "videos": 5},
        {"problem_id": "bad-fps", "problem": "q", "answer": "a", "videos": [good[1]], "fps": -1},
        "{this is not json",
        ["not", "an", "object"],
    ]
    data = _write_jsonl(tmp_path / "data.jsonl", rows)
    report = preprocess([data], CFG, str(tmp_path / "cache"), workers=2, progress=False)

    assert report["built"] == 3 and report["failed"] == 7
    assert (report["image_records"], report["text_records"], report["bad_records"]) == (1, 1, 4)
    assert len(_entries(tmp_path / "cache")) == 3
    failures = [json.loads(line) for line in open(tmp_path / "cache" / "failures.jsonl")]
    by_record = {f["record"]: f["reason"] for f in failures}
    assert "file not found" in by_record["missing"]
    assert "empty" in by_record["empty"]
    assert "no video stream" in by_record["audio"]
    for rid in ("corrupt", "truncated", "text", "image-as-video"):
        assert rid in by_record and by_record[rid], rid
    assert "videos" in by_record["bad-videos"] and "fps" in by_record["bad-fps"]
    assert sum("data.jsonl:" in (f.get("source") or "") for f in failures) >= 4  # file:line named
    assert "image-record" not in by_record and "text-record" not in by_record
    manifest = [json.loads(line) for line in open(tmp_path / "cache" / "manifest.jsonl")]
    assert len(manifest) == 10 and {m["status"] for m in manifest} == {"built", "failed"}


def test_cli_exit_status_and_strict(tmp_path):
    good = make_video(tmp_path, "g", fps=10, duration=1)
    data = _write_jsonl(
        tmp_path / "d.jsonl",
        [{"problem": "q", "videos": [good]}, {"problem": "q", "videos": [str(tmp_path / "missing.mp4")]}],
    )
    base = [
        sys.executable,
        "-m",
        "easyvideor1",
        "preprocess",
        "--data",
        data,
        "--cache-dir",
        str(tmp_path / "c"),
        "--workers",
        "1",
        "--quiet",
        "--max-pixels",
        str(64 * 32 * 32),
        "--min-pixels",
        "4096",
        "--model-family",
        "qwen3vl",
    ]
    ok = subprocess.run(base, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    assert "1 built" in ok.stdout and "1 failed" in ok.stdout
    strict = subprocess.run(base + ["--strict"], capture_output=True, text=True)
    assert strict.returncode == 1 and "1 reused" in strict.stdout


def _file_size_limit(limit: int):
    """A child's writes past ``limit`` bytes fail with EFBIG, as on a full disk (no root needed)."""
    import resource

    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # the default action kills instead of failing
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_failed_manifest_merge_is_one_line_and_keeps_the_manifest(tmp_path):
    videos = [make_video(tmp_path, f"v{i}", fps=10, duration=1) for i in range(3)]
    data = _write_jsonl(tmp_path / "d.jsonl", [{"problem": "q", "videos": [v]} for v in videos])
    cmd = [sys.executable, "-m", "easyvideor1", "preprocess", "--data", data, "--cache-dir", str(tmp_path / "c"),
           "--workers", "1", "--quiet", "--min-pixels", "4096", "--max-pixels", str(64 * 32 * 32),
           "--model-family", "qwen3vl"]  # fmt: skip
    assert subprocess.run(cmd, capture_output=True, text=True).returncode == 0
    manifest = tmp_path / "c" / "manifest.jsonl"
    before = manifest.read_bytes()
    assert len(before) > 300  # the rerun reuses every entry: the merged manifest is its first big write
    r = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=_file_size_limit(300))
    assert r.returncode == 1 and r.stderr.strip().splitlines() == [
        f"easyvideor1 preprocess: cannot write {manifest}: File too large (EFBIG)"
    ], r.stderr[-2000:]
    assert manifest.read_bytes() == before, "the previous manifest stays whole"
    assert not list(manifest.parent.glob("manifest.jsonl.tmp.*")), "no temporary file left behind"


def test_sigkill_midway_then_rerun_gives_a_complete_valid_cache(tmp_path):
    videos = [make_video(tmp_path, f"v{i}", fps=30, duration=6, size=(320, 240)) for i in range(10)]
    data = _write_jsonl(tmp_path / "d.jsonl", [{"problem": "q", "videos": [v]} for v in videos])
    cache = tmp_path / "cache"
    cmd = [
        sys.executable,
        "-m",
        "easyvideor1",
        "preprocess",
        "--data",
        data,
        "--cache-dir",
        str(cache),
        "--workers",
        "2",
        "--quiet",
        "--fps",
        "4",
        "--max-pixels",
        str(240 * 320),
        "--min-pixels",
        "4096",
        "--model-family",
        "qwen3vl",
    ]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(_entries(cache)) < 3:
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # the job and its workers, mid-write or not
    proc.wait()
    done_before = len(_entries(cache))
    assert 0 < done_before < 10, "the kill must land midway"
    for e in _entries(cache):
        read_header(e)  # every file a reader can see is complete
    # a writer killed mid-write leaves only a temporary file, which readers never look at
    rerun = subprocess.run(cmd, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    report = json.loads((cache / "report.json").read_text())
    assert report["built"] + report["reused"] == 10 and report["failed"] == 0
    assert report["reused"] >= done_before
    assert not list(cache.glob("*/*.tmp.*")), "stale temporary files are cleaned up"
    for e in _entries(cache):
        assert read_entry(e).frames.shape[0] == 24


def test_rerun_reuses_and_parameter_or_content_change_rebuilds(tmp_path):
    videos = [make_video(tmp_path, f"v{i}", fps=10, duration=2) for i in range(3)]
    data = _write_jsonl(tmp_path / "d.jsonl", [{"problem": "q", "videos": [v]} for v in videos])
    cache = str(tmp_path / "cache")
    assert preprocess([data], CFG, cache, workers=1, progress=False)["built"] == 3
    again = preprocess([data], CFG, cache, workers=1, progress=False)
    assert (again["built"], again["reused"]) == (0, 3)
    other_fps = DataConfig(
        model_family="qwen3vl",
        video_fps=1.0,
        video_min_pixels=CFG.video_min_pixels,
        video_max_pixels=CFG.video_max_pixels,
    )
    assert preprocess([data], other_fps, cache, workers=1, progress=False)["built"] == 3
    make_video(tmp_path, "v0", fps=10, duration=3)  # replace one video's content
    r = preprocess([data], CFG, cache, workers=1, progress=False)
    assert (r["built"], r["reused"]) == (1, 2)
    assert len(list(Path(cache).glob("*/*.safetensors"))) == 7


def test_shards_partition_the_videos(tmp_path):
    videos = [make_video(tmp_path, f"v{i}", fps=10, duration=1) for i in range(8)]
    data = _write_jsonl(tmp_path / "d.jsonl", [{"problem": "q", "videos": [v]} for v in videos])
    cache = str(tmp_path / "cache")
    a = preprocess([data], CFG, cache, workers=1, shard=(0, 2), progress=False)
    b = preprocess([data], CFG, cache, workers=1, shard=(1, 2), progress=False)
    assert a["videos"] + b["videos"] == 8 and a["built"] + b["built"] == 8
    assert (Path(cache) / "manifest.shard-0-of-2.jsonl").exists()


def _sleepy(x):
    if x == "hang":
        time.sleep(3600)
    if x == "crash":
        os._exit(3)
    return x * 2


def test_time_limit_kills_a_hung_task_and_the_rest_completes():
    t0 = time.monotonic()
    results = {
        tid: (ok, r)
        for tid, ok, r in run_tasks(
            _sleepy, [(0, "a"), (1, "hang"), (2, "b"), (3, "crash"), (4, "c")], workers=2, time_limit=1.0
        )
    }
    assert time.monotonic() - t0 < 10
    assert results[0] == (True, "aa") and results[2] == (True, "bb") and results[4] == (True, "cc")
    assert results[1][0] is False and "time limit" in results[1][1]
    assert results[3][0] is False and "died" in results[3][1]


@pytest.mark.parametrize("workers", [0, 1])
def test_a_failed_background_write_is_reported_not_trusted(tmp_path, workers):
    from easyvideor1.media.cache import entry_key

    good = [make_video(tmp_path, f"w{i}", fps=10, duration=1) for i in range(2)]
    data = _write_jsonl(
        tmp_path / "d.jsonl",
        [{"problem_id": f"r{i}", "problem": "q", "videos": [v]} for i, v in enumerate(good)],
    )
    cache = tmp_path / "cache"
    cache.mkdir()
    key = entry_key(good[0], CFG.sampling_params())
    (cache / key[:2]).write_text("a file where the entry's directory should be")
    report = preprocess([data], CFG, str(cache), workers=workers, progress=False)
    assert (report["built"], report["failed"]) == (1, 1)
    failures = {f["record"]: f["reason"] for f in map(json.loads, open(cache / "failures.jsonl"))}
    assert "r0" in failures and failures["r0"]
