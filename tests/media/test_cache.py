"""The frame cache: format, keys, invalidation, atomicity, loading modes, no pickles."""

from __future__ import annotations

import json
import os
import pickle
import struct
import threading

import pytest
import torch

from easyvideor1.media.cache import (
    METADATA_KEY,
    CacheError,
    VideoLoader,
    entry_key,
    entry_path,
    read_entry,
    read_header,
    write_entry,
)
from easyvideor1.media.failures import MediaFailure, loading
from easyvideor1.media.sampling import SamplingParams
from easyvideor1.media.video import sample_video
from tests.conftest import make_video

P = SamplingParams(factor=32, fps=2.0, min_pixels=4 * 32 * 32, max_pixels=64 * 32 * 32)


@pytest.fixture
def built(tmp_path, small_video):
    video = sample_video(small_video, P)
    entry = entry_path(tmp_path / "cache", entry_key(small_video, P))
    write_entry(entry, video)
    return video, entry


def test_entry_round_trip_and_documented_metadata(built):
    video, entry = built
    loaded = read_entry(entry)
    assert loaded.frames.dtype == torch.uint8 and loaded.frames.shape == video.frames.shape
    assert torch.equal(loaded.frames, video.frames)
    for key in (
        "source_path source_size source_mtime_ns source_fps total_frames frame_indices sample_fps "
        "height width params version"
    ).split():
        assert key in loaded.meta
    assert loaded.meta["params"]["factor"] == 32 and loaded.meta["params"]["fps"] == 2.0
    # the file is plain safetensors: the reference implementation reads it too
    from safetensors import safe_open

    with safe_open(str(entry), "pt") as f:
        assert json.loads(f.metadata()[METADATA_KEY])["frame_indices"] == video.meta["frame_indices"]
        assert torch.equal(f.get_tensor("frames"), video.frames)


def test_loaded_frames_are_copy_on_write(built):
    _, entry = built
    before = entry.read_bytes()
    loaded = read_entry(entry)
    loaded.frames.zero_()
    assert entry.read_bytes() == before


def test_key_changes_with_content_and_parameters(tmp_path):
    path = make_video(tmp_path, "k", fps=10, duration=1)
    k1 = entry_key(path, P)
    assert entry_key(path, P) == k1
    assert entry_key(path, P.replace(fps=1.0)) != k1
    assert entry_key(path, P.replace(factor=28)) != k1
    assert entry_key(path, P.replace(max_frames=4)) != k1
    st = os.stat(path)
    make_video(tmp_path, "k", fps=10, duration=1, size=(80, 48))  # a different video, same path
    assert entry_key(path, P) != k1
    # even with the old mtime put back, the content fingerprint tells them apart
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert entry_key(path, P) != k1


@pytest.mark.parametrize("cut", [4, 100, -1])
def test_truncated_entries_are_never_trusted(built, cut):
    _, entry = built
    data = entry.read_bytes()
    entry.write_bytes(data[:cut])
    with pytest.raises(CacheError):
        read_header(entry)


def test_pickles_are_never_loaded(tmp_path):
    marker = tmp_path / "pwned"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    bad = tmp_path / "entry.safetensors"
    payload = pickle.dumps(Evil())
    bad.write_bytes(struct.pack("<Q", len(payload)) + payload)
    with pytest.raises(CacheError):
        read_entry(bad)
    assert not marker.exists()


def test_loader_modes(tmp_path, small_video, built):
    video, entry = built
    cache_dir = entry.parent.parent
    hit = VideoLoader(str(cache_dir), "prefer_cache")
    assert torch.equal(hit.load(small_video, P).frames, video.frames)
    assert (hit.stats.hits, hit.stats.decoded) == (1, 0)

    other = P.replace(fps=1.0)  # not in the cache
    miss = VideoLoader(str(cache_dir), "prefer_cache")
    assert miss.load(small_video, other).frames.shape[0] == 2 * 2  # decoded instead: 3 s at 1 fps -> 4 (min)
    assert miss.stats.decoded == 1 and "no cache entry" in miss.stats.fallbacks[0]

    with pytest.raises(CacheError, match="cache_only"):
        VideoLoader(str(cache_dir), "cache_only").load(small_video, other)

    ignore = VideoLoader(str(cache_dir), "decode_only")
    ignore.load(small_video, P)
    assert (ignore.stats.hits, ignore.stats.decoded) == (0, 1)


def test_entry_for_other_parameters_is_rejected(tmp_path, small_video, built):
    video, entry = built
    loader = VideoLoader(str(entry.parent.parent), "cache_only")
    with pytest.raises(CacheError, match="sampling parameters differ"):
        loader.load(small_video, P.replace(max_frames=2), entry=entry)


def test_replaced_video_is_not_served_from_a_stale_entry(tmp_path):
    path = make_video(tmp_path, "r", fps=10, duration=2)
    cache = tmp_path / "c"
    write_entry(entry_path(cache, entry_key(path, P)), sample_video(path, P))
    loader = VideoLoader(str(cache), "prefer_cache")
    loader.load(path, P)
    make_video(tmp_path, "r", fps=10, duration=3)  # replaced in place
    fresh = loader.load(path, P)
    assert loader.stats.hits == 1 and loader.stats.decoded == 1
    assert fresh.meta["total_frames"] == 30


def test_malformed_metadata_is_a_cache_error(tmp_path):
    bad = tmp_path / "bad.safetensors"
    header = json.dumps(
        {
            "__metadata__": {METADATA_KEY: "{not json"},
            "frames": {"dtype": "U8", "shape": [1, 1, 1, 3], "data_offsets": [0, 3]},
        }
    ).encode()
    bad.write_bytes(struct.pack("<Q", len(header)) + header + b"abc")
    with pytest.raises(CacheError, match="corrupt entry header"):
        read_header(bad)
    header = json.dumps(["not", "a", "table"]).encode()
    bad.write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(CacheError):
        read_header(bad)


def _rewrite_header(entry, edit) -> None:
    """Rewrite a real entry's header through ``edit(tensor record, metadata)``, keeping its frames."""
    data = entry.read_bytes()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    meta = json.loads(header["__metadata__"][METADATA_KEY])
    frames = data[8 + n :]
    frames = edit(header["frames"], meta) or frames
    header["__metadata__"][METADATA_KEY] = json.dumps(meta)  # NaN stays NaN, as json writes it
    blob = json.dumps(header).encode()
    entry.write_bytes(struct.pack("<Q", len(blob)) + blob + frames)


def _no_frames(table, meta):
    table["shape"][0], table["data_offsets"], meta["frame_indices"] = 0, [0, 0], []
    return b""


CORRUPTIONS = {
    "float shape": (lambda t, m: t.update(shape=[float(d) for d in t["shape"]]), "not four whole numbers"),
    "zero frames": (_no_frames, "entry holds no frames"),
    "fps zero": (lambda t, m: m.update(source_fps=0), "source_fps is 0, expected a finite number > 0"),
    "fps NaN": (lambda t, m: m.update(source_fps=float("nan")), "source_fps is nan"),
    "fps infinite": (lambda t, m: m.update(source_fps=float("inf")), "source_fps is inf"),
    "index past the end": (
        lambda t, m: m["frame_indices"].__setitem__(-1, 10**15),
        "frame index 1000000000000000 is outside the video's 90 frames",
    ),
    "negative index": (lambda t, m: m["frame_indices"].__setitem__(0, -3), "frame index -3 is outside"),
    "float index": (
        lambda t, m: m["frame_indices"].__setitem__(0, 0.5),
        "frame_indices is not a list of whole",
    ),
    "NaN frame time": (lambda t, m: m["frame_times"].__setitem__(0, float("nan")), "frame_times is not one"),
    "text height": (lambda t, m: m.update(height="64"), "height is a string, expected a whole number"),
    "nested header": (lambda t, m: t.update(shape=[[[[1]]]] * 4), "not four whole numbers"),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_corrupt_header_fields_fail_the_one_record(tmp_path, small_video, built, case):
    """Each field of an entry's header is untrusted: a bad one is a CacheError naming the entry and the
    field, which the batch jobs turn into that record's failure (cache_only) or a decode (prefer_cache)."""
    video, entry = built
    edit, reason = CORRUPTIONS[case]
    _rewrite_header(entry, edit)
    with pytest.raises(CacheError) as e:
        read_entry(entry)
    assert str(e.value).startswith(f"{entry}: ") and reason in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(MediaFailure) as failed, loading("clip.mp4", small_video):
        VideoLoader(str(tmp_path / "cache"), "cache_only").load(small_video, P)
    assert (
        failed.value.reason.startswith("clip.mp4: frame cache entry corrupt: ")
        and reason in failed.value.reason
    )
    fallback = VideoLoader(str(tmp_path / "cache"), "prefer_cache")
    assert torch.equal(fallback.load(small_video, P).frames, video.frames)
    assert fallback.stats.decoded == 1 and reason in fallback.stats.fallbacks[0]


@pytest.mark.parametrize("kind", ["fifo", "symlink"])
def test_an_entry_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path, small_video, built, kind):
    video, entry = built
    if kind == "fifo":  # opening a pipe for reading would wait for a writer for ever
        entry.unlink()
        os.mkfifo(entry)
        expected = "not a regular file (a named pipe (FIFO))"
    else:  # a link is never followed, even to a valid entry
        moved = tmp_path / "elsewhere.safetensors"
        entry.rename(moved)
        entry.symlink_to(moved)
        expected = "not a regular file (a symbolic link)"
    outcome: dict = {}

    def load():
        try:
            VideoLoader(str(tmp_path / "cache"), "cache_only").load(small_video, P)
        except CacheError as e:
            outcome["error"] = e

    reader = threading.Thread(target=load, daemon=True)
    reader.start()
    reader.join(2.0)
    assert not reader.is_alive(), "blocked on the entry"
    assert expected in outcome["error"].cause and str(entry) in outcome["error"].cause
