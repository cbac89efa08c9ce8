"""Cache keys notice in-place rewrites; copies and moves behave as the cache module documents."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch

from easyvideor1.data.config import DataConfig
from easyvideor1.data.preprocess import preprocess
from easyvideor1.media.cache import CacheError, VideoLoader, entry_key, read_entry
from easyvideor1.media.identity import sample_offsets, source_identity
from easyvideor1.media.manifest import read_rows
from tests.conftest import make_video

CFG = DataConfig(
    model_family="qwen3vl", video_fps=2.0, video_min_pixels=4 * 32 * 32, video_max_pixels=64 * 32 * 32
)
P = CFG.sampling_params()


def _unsampled_gap(size: int) -> int:
    """An offset in the middle of the file that the sampled digest does not read."""
    blocks = sample_offsets(size)
    gaps = [(o + n, blocks[i + 1][0]) for i, (o, n) in enumerate(blocks[:-1])]
    start, end = min(gaps, key=lambda g: abs(g[0] + g[1] - size))
    assert end - start > 400
    return start + 100


def _rewrite_in_place(path: str, offset: int, length: int = 200) -> None:
    """Invert ``length`` bytes at ``offset`` in place, then put size and mtime back."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(offset)
        data = f.read(length)
        f.seek(offset)
        f.write(bytes(255 - b for b in data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_mtime_ns, after.st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)


def _run(tmp_path: Path, video: str) -> dict:
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"problem": "q", "videos": [video]}) + "\n")
    return preprocess([str(data)], CFG, str(tmp_path / "cache"), workers=1, progress=False)


@pytest.fixture
def video(tmp_path) -> str:
    # h264 whose middle is inter-coded data: a few inverted bytes change the decoded frames
    return make_video(tmp_path, "v", fps=10, duration=6, size=(640, 480))


def test_in_place_rewrite_with_size_and_mtime_restored_is_rebuilt(tmp_path, video):
    assert _run(tmp_path, video)["built"] == 1
    old_entry = tmp_path / "cache" / read_rows(tmp_path / "cache" / "manifest.jsonl")[0]["entry"]
    old_frames = read_entry(old_entry).frames.clone()
    before = source_identity(video)
    _rewrite_in_place(video, _unsampled_gap(before.size))
    after = source_identity(video)
    # the change is invisible to size, mtime and the sampled digest: only the ctime tells
    assert (after.size, after.mtime_ns, after.digest) == (before.size, before.mtime_ns, before.digest)
    assert after.ctime_ns != before.ctime_ns

    with pytest.raises(CacheError, match="no cache entry"):  # the stale entry is never served
        VideoLoader(str(tmp_path / "cache"), "cache_only").load(video, P)
    report = _run(tmp_path, video)
    assert (report["built"], report["reused"]) == (1, 0)
    rows = read_rows(tmp_path / "cache" / "manifest.jsonl")
    assert len(rows) == 1 and rows[0]["source"]["ctime_ns"] == after.ctime_ns
    new = VideoLoader(str(tmp_path / "cache"), "cache_only").load(video, P)
    assert not torch.equal(new.frames, old_frames), "the rewrite changed frames: the old entry was stale"


def test_a_rewrite_of_sampled_bytes_changes_the_digest(tmp_path, video):
    before = source_identity(video)
    offset, _ = sample_offsets(before.size)[len(sample_offsets(before.size)) // 2]
    _rewrite_in_place(video, offset, 16)
    after = source_identity(video)
    assert after.digest != before.digest and entry_key(video, P) != entry_key(video, P, before)


def test_chmod_changes_the_key_a_needless_rebuild_never_a_stale_entry(tmp_path, video):
    k = entry_key(video, P)
    time.sleep(0.05)  # the kernel stamps ctime at clock-tick granularity (up to 10 ms)
    os.chmod(video, 0o640)
    assert entry_key(video, P) != k


def test_copies_and_moves_behave_as_documented(tmp_path, video):
    _run(tmp_path, video)
    cache = str(tmp_path / "cache")
    original = Path(video).read_bytes()

    # a copy or a move to another path: a new path, a new entry
    moved = str(tmp_path / "moved.mp4")
    shutil.copy2(video, moved)
    with pytest.raises(CacheError, match="no cache entry"):
        VideoLoader(cache, "cache_only").load(moved, P)

    # the file copied over itself on the machine that built the entry (new inode, mtime kept): rebuilt
    replacement = tmp_path / "replacement.mp4"
    shutil.copy2(video, replacement)
    os.replace(replacement, video)
    with pytest.raises(CacheError, match="no cache entry"):
        VideoLoader(cache, "cache_only").load(video, P)

    # the same file as another machine's copy at the same path (rsync -a): the manifest row was
    # written by that machine; size, mtime and sampled digest agree, so its entry serves this copy
    manifest = tmp_path / "cache" / "manifest.jsonl"
    rows = read_rows(manifest)
    rows[0]["host"] = "another-machine"
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    loader = VideoLoader(cache, "cache_only")
    assert loader.load(video, P).frames.shape[0] == 12 and loader.stats.hits == 1

    # ... unless its content differs where the digest samples it
    st = os.stat(video)
    blocks = sample_offsets(st.st_size)
    _rewrite_in_place(video, blocks[len(blocks) // 2][0], 16)
    with pytest.raises(CacheError, match="no cache entry"):
        VideoLoader(cache, "cache_only").load(video, P)
    Path(video).write_bytes(original)
    os.utime(video, ns=(st.st_atime_ns, st.st_mtime_ns))

    # and on shared storage the same inode with a new ctime is a rewrite, whatever the host says
    rows[0]["source"]["inode"] = os.stat(video).st_ino
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(CacheError, match="no cache entry"):
        VideoLoader(cache, "cache_only").load(video, P)

    # a source this machine cannot see at all: the manifest's entry is used as built
    os.unlink(video)
    assert VideoLoader(cache, "cache_only").load(video, P).frames.shape[0] == 12
