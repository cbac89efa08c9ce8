"""The manifest is merged, not overwritten: successive, concurrent and sharded runs keep every line."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import subprocess
import sys
from pathlib import Path

import pytest

from easyvideor1.data.config import DataConfig
from easyvideor1.data.preprocess import preprocess
from easyvideor1.media.cache import CacheError, VideoLoader, entry_key, entry_path, params_key, write_entry
from easyvideor1.media.manifest import load_index, read_rows, write_merged
from easyvideor1.media.video import sample_video
from tests.conftest import make_video

CFG = DataConfig(
    model_family="qwen3vl", video_fps=2.0, video_min_pixels=4 * 32 * 32, video_max_pixels=64 * 32 * 32
)


def _data(path: Path, videos: list[str]) -> str:
    path.write_text("".join(json.dumps({"problem": "q", "videos": [v]}) + "\n" for v in videos))
    return str(path)


def _rows(cache: Path, name: str = "manifest.jsonl") -> dict[str, dict]:
    return {r["source_path"]: r for r in read_rows(cache / name)}


@pytest.fixture
def two_sets(tmp_path) -> tuple[Path, list[str], list[str]]:
    src = tmp_path / "src"
    src.mkdir()
    a = [make_video(src, f"a{i}", fps=10, duration=1) for i in range(3)]
    b = [make_video(src, f"b{i}", fps=10, duration=1) for i in range(3)]
    return src, a, b


def _cache_only_through_manifest(tmp_path: Path, src: Path, cache: Path, videos: list[str]) -> None:
    """Hide the sources (as on a machine that only sees the cache) and load every video."""
    hidden = tmp_path / "elsewhere"
    src.rename(hidden)
    try:
        loader = VideoLoader(str(cache), "cache_only")
        params = CFG.sampling_params()
        for v in videos:
            assert not os.path.exists(v)
            assert loader.load(v, params).frames.shape[0] == 4
        assert loader.stats.hits == len(videos)
    finally:
        hidden.rename(src)


def test_successive_runs_keep_every_line(tmp_path, two_sets):
    src, a, b = two_sets
    cache = tmp_path / "cache"
    assert (
        preprocess([_data(tmp_path / "a.jsonl", a)], CFG, str(cache), workers=1, progress=False)["built"] == 3
    )
    report = preprocess([_data(tmp_path / "b.jsonl", b)], CFG, str(cache), workers=1, progress=False)
    assert report["built"] == 3 and report["manifest_rows"] == 6
    rows = _rows(cache)
    assert set(rows) == set(a + b) and {r["status"] for r in rows.values()} == {"built"}
    # a rerun of the first file replaces its rows (reused now): no duplicates, the others stay
    again = preprocess([_data(tmp_path / "a.jsonl", a)], CFG, str(cache), workers=1, progress=False)
    assert again["reused"] == 3
    lines = (cache / "manifest.jsonl").read_text().splitlines()
    assert len(lines) == 6
    assert {p: r["status"] for p, r in _rows(cache).items()} == {
        **dict.fromkeys(a, "reused"),
        **dict.fromkeys(b, "built"),
    }
    _cache_only_through_manifest(tmp_path, src, cache, a + b)


def test_rows_of_removed_entries_are_dropped_on_merge(tmp_path, two_sets):
    _, a, b = two_sets
    cache = tmp_path / "cache"
    preprocess([_data(tmp_path / "a.jsonl", a)], CFG, str(cache), workers=1, progress=False)
    gone = cache / _rows(cache)[a[0]]["entry"]
    gone.unlink()  # e.g. a pruned cache
    preprocess([_data(tmp_path / "b.jsonl", b)], CFG, str(cache), workers=1, progress=False)
    assert set(_rows(cache)) == set(a[1:] + b)


def test_two_concurrent_cli_runs_keep_every_line(tmp_path, two_sets):
    src, a, b = two_sets
    cache = tmp_path / "cache"
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "easyvideor1", "preprocess", "--data", _data(tmp_path / f"{n}.jsonl", v)]
            + [
                "--cache-dir",
                str(cache),
                "--workers",
                "1",
                "--quiet",
                "--fps",
                "2",
                "--model-family",
                "qwen3vl",
            ]
            + ["--min-pixels", str(4 * 32 * 32), "--max-pixels", str(64 * 32 * 32)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n, v in (("a", a), ("b", b))
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        assert "3 built" in out
    rows = _rows(cache)
    assert set(rows) == set(a + b)
    assert all((cache / r["entry"]).is_file() for r in rows.values())
    _cache_only_through_manifest(tmp_path, src, cache, a + b)


def _merge_many(cache: str, worker: int, rounds: int) -> None:
    for i in range(rounds):
        row = {"source_path": f"/v/{worker}/{i}.mp4", "params_key": "p", "status": "failed", "entry": None}
        write_merged(cache, "manifest.jsonl", [row])


def test_concurrent_merges_lose_no_row(tmp_path):
    # Many writers merging at the same moment: without the lock, read-merge-rename loses rows.
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_merge_many, args=(str(tmp_path), w, 25)) for w in range(6)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(read_rows(tmp_path / "manifest.jsonl")) == 6 * 25
    assert not list(tmp_path.glob("manifest.jsonl.tmp.*"))


def test_shards_keep_their_own_merged_manifests(tmp_path):
    videos = [make_video(tmp_path, f"v{i}", fps=10, duration=1) for i in range(6)]
    more = [make_video(tmp_path, f"w{i}", fps=10, duration=1) for i in range(4)]
    cache = tmp_path / "cache"
    for i in range(2):
        preprocess(
            [_data(tmp_path / "d.jsonl", videos)], CFG, str(cache), workers=1, shard=(i, 2), progress=False
        )
    first = [_rows(cache, f"manifest.shard-{i}-of-2.jsonl") for i in range(2)]
    assert not set(first[0]) & set(first[1]) and set(first[0]) | set(first[1]) == set(videos)
    for i in range(2):  # each shard again, on another file: its earlier rows stay
        preprocess(
            [_data(tmp_path / "e.jsonl", more)], CFG, str(cache), workers=1, shard=(i, 2), progress=False
        )
    second = [_rows(cache, f"manifest.shard-{i}-of-2.jsonl") for i in range(2)]
    assert set(second[0]) >= set(first[0]) and set(second[1]) >= set(first[1])
    assert set(second[0]) | set(second[1]) == set(videos + more)
    assert {p for p, _ in load_index(cache)} == set(videos + more)
    assert not (cache / "manifest.jsonl").exists()


def test_malformed_manifest_lines_are_skipped_and_named(tmp_path, two_sets, capsys):
    _, a, _ = two_sets
    cache = tmp_path / "cache"
    preprocess([_data(tmp_path / "a.jsonl", a)], CFG, str(cache), workers=1, progress=False)
    with open(cache / "manifest.jsonl", "a") as f:
        f.write("{not json\n[1, 2]\n")
    assert len(load_index(cache)) == 3
    err = capsys.readouterr().err
    assert "manifest.jsonl:4" in err and "manifest.jsonl:5" in err
    with pytest.raises(CacheError, match="no cache entry"):
        VideoLoader(str(cache), "cache_only").load(str(tmp_path / "never.mp4"), CFG.sampling_params())


@pytest.mark.parametrize("where", ["inside", "parent", "absolute", "link"])
def test_a_row_naming_a_file_outside_the_cache_is_never_opened(tmp_path, monkeypatch, capsys, where):
    """A manifest is untrusted: a row whose entry leads out of the cache directory is skipped with a
    warning, and the file it names is neither opened nor quoted."""
    params = CFG.sampling_params()
    cache, outside = tmp_path / "cache", tmp_path / "outside"
    outside.mkdir()
    secret = outside / "passwd"
    secret.write_text("root:x:0:0:SECRET-LINE\n")
    video = make_video(tmp_path, "v", fps=10, duration=1, size=(32, 32))
    real = entry_path(cache, entry_key(video, params))
    write_entry(real, sample_video(video, params))
    os.rename(video, tmp_path / "moved.mp4")  # a machine that sees the cache, not the source
    entry = {
        "inside": str(real.relative_to(cache)),  # the control: the same row, confined, loads
        "parent": "../outside/passwd",
        "absolute": str(secret),
        "link": "zz/passwd",  # a planted fan-out folder linking out of the cache
    }[where]
    (cache / "zz").symlink_to(outside)
    row = {
        "source_path": video,
        "params_key": params_key(params),
        "entry": entry,
        "status": "built",
        "time": 1.0,
    }
    write_merged(cache, "manifest.jsonl", [row])
    opened = []
    real_open = os.open
    monkeypatch.setattr(
        os, "open", lambda path, *a, **k: opened.append(str(path)) or real_open(path, *a, **k)
    )
    loader = VideoLoader(str(cache), "cache_only")
    if where == "inside":
        assert loader.load(video, params).frames.shape[0] == 4
        return
    with pytest.raises(CacheError, match="no cache entry") as e:
        loader.load(video, params)
    assert not any("passwd" in p for p in opened)
    said = capsys.readouterr().err + str(e.value)
    assert "outside the cache directory" in said or "out of the cache directory" in said
    assert "SECRET" not in said


@pytest.mark.parametrize("bad", [{"entry": 7}, {"entry": ""}, {"time": float("nan")}, {"time": "soon"}])
def test_rows_with_untrusted_fields_are_skipped(tmp_path, capsys, bad):
    row = {"source_path": "/v.mp4", "params_key": "p", "entry": "ab/c.safetensors", "status": "built", **bad}
    (tmp_path / "manifest.jsonl").write_text(json.dumps(row) + "\n")
    assert read_rows(tmp_path / "manifest.jsonl") == []
    assert "manifest.jsonl:1: skipped" in capsys.readouterr().err
