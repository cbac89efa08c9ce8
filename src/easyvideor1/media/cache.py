"""The offline frame cache: one safetensors file per (video file, sampling parameters).

Entry format (documented in the README):
- tensor ``frames``: uint8 ``[T, H, W, 3]``, already sampled and resized;
- safetensors metadata key ``easyvideor1``: a JSON object with ``source_path``, ``source_size``,
  ``source_mtime_ns``, ``source_fps``, ``total_frames``, ``frame_indices``, ``sample_fps``,
  ``height``, ``width``, ``params`` (every sampling parameter and the factor), ``version``.

Writes go to a temporary file that is fsynced and renamed: a reader never sees a half-written entry.
Reads memory-map the file and parse the header ourselves (JSON only; nothing is ever unpickled).

The key hashes the absolute path, size, mtime, inode, ctime and a sampled content digest of the
source (:mod:`.identity`: the first and last 64 KiB and 32 blocks of 4 KiB spread over the file),
every sampling parameter and the format version. What that catches, on the machine that reads the
source:
- a changed parameter, a replaced file, a different file at the same path: new key;
- an in-place rewrite with size and mtime put back (``os.utime``): the ctime changes (no user call can
  set it back), and so does the key, however few bytes changed and wherever they are;
- ``chmod``/``chown``/``touch`` also change the ctime: a needless rebuild, never a stale entry.
A moved or copied file is a new path, hence a new entry; a file copied over itself keeps its
path but gets a new ctime (and often inode): rebuilt.

Shared storage, the trade-off. The inode and ctime are the file's identity on one filesystem:
- the cache and the sources on shared storage (NFS): every machine sees the same inode and ctime,
  so the same key: built once, found everywhere, and a rewrite seen from any machine misses;
- the cache shared but each machine reading its own copy of the sources at the same path (``rsync
  -a``): the copies have their own inode and ctime, so the key misses. The loader then looks the
  (path, parameters) up in the manifests and accepts the entry if size, mtime and the sampled digest
  agree with the local copy (``manifest.row_fits``); on the building machine and device, or when
  the inode is the same, the miss stands. So a copy is trusted on its sampled content: an edit that
  keeps size and mtime and avoids every sampled block would go unnoticed there (reading whole files
  on every lookup would cost more than the cache saves). ``preprocess`` itself never takes this
  path: on another machine it builds entries under that machine's keys;
- the source not visible at all on the reading machine: the manifest's entry is used as built, with
  nothing to check it against.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..errors import ConfigError
from .failures import NO_CACHE_ENTRY, CacheError, DecodeError, corrupt_entry, not_regular, unusable_entry
from .identity import SourceIdentity, source_identity
from .manifest import entry_file, load_index, row_fits
from .sampling import SamplingParams
from .video import FORMAT_VERSION, SampledVideo, sample_video

METADATA_KEY = "easyvideor1"
ENTRY_SUFFIX = ".safetensors"
CACHE_MODES = ("prefer_cache", "cache_only", "decode_only")
_REQUIRED_META = (
    "source_path source_size source_mtime_ns source_fps total_frames frame_indices sample_fps "
    "height width params version"
).split()
MAX_HEADER_BYTES = 100 * 1024 * 1024  # a header past this is corruption, never read into memory
_REBUILD = "(cache_only mode: rebuild it with `easyvideor1 preprocess`)"


def params_key(params: SamplingParams) -> str:
    """A short stable hash of the sampling parameters (used in manifests)."""
    blob = json.dumps(params.to_dict(), sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def entry_key(video_path: str, params: SamplingParams, identity: SourceIdentity | None = None) -> str:
    """Content-aware key of a video under given sampling parameters (see the module docstring).

    ``identity`` is the source's :func:`~.identity.source_identity`, taken now when not given; take
    it *before* decoding, so that a file changed during the decode files its frames under the old key.
    """
    path = os.path.abspath(video_path)
    ident = identity or source_identity(path)
    blob = json.dumps(
        {
            "path": path,
            "size": ident.size,
            "mtime_ns": ident.mtime_ns,
            "inode": ident.inode,
            "ctime_ns": ident.ctime_ns,
            "digest": ident.digest,
            "params": params.to_dict(),
            "version": FORMAT_VERSION,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def entry_path(cache_dir: str | os.PathLike, key: str) -> Path:
    # two-character fan-out keeps directories small for 100k-video caches
    return Path(cache_dir) / key[:2] / f"{key}{ENTRY_SUFFIX}"


def write_entry(path: str | os.PathLike, video: SampledVideo) -> int:
    """Atomically write an entry; returns its size in bytes."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp.{socket.gethostname()}.{os.getpid()}")
    import torch  # here, not at the top: run configs import this module and must load no torch

    frames = video.frames
    if frames.dtype != torch.uint8 or frames.ndim != 4 or frames.shape[-1] != 3:
        raise ValueError(f"frames must be uint8 [T, H, W, 3], got {frames.dtype} {tuple(frames.shape)}")
    try:
        _write_safetensors(tmp, frames.contiguous().numpy(), {METADATA_KEY: json.dumps(video.meta)})
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)
    return path.stat().st_size


def _write_safetensors(path: Path, frames: np.ndarray, metadata: dict[str, str]) -> None:
    """Write a one-tensor safetensors file straight from the array's buffer, then fsync it.

    The format is an 8-byte little-endian header length, a JSON header (padded with spaces to a
    multiple of 8, as the reference writer does) and the raw bytes. Writing it ourselves avoids the
    full in-memory copy ``safetensors.torch.save_file`` makes; ``tests/media/test_cache.py`` reads
    the result back with the safetensors library itself.
    """
    header = {
        "__metadata__": metadata,
        "frames": {"dtype": "U8", "shape": list(frames.shape), "data_offsets": [0, frames.nbytes]},
    }
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        f.write(memoryview(frames).cast("B"))
        f.flush()
        os.fsync(f.fileno())


def read_header(path: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any], int]:
    """Parse and check a safetensors header: (tensor table, our metadata, data offset).

    The entry is untrusted input (see :func:`open_entry` and :func:`check_entry`): anything that is
    not a well-formed entry is a :class:`CacheError` naming it and the reason.
    """
    with open_entry(path) as f:
        return _read_header(f, str(path))


def read_entry(path: str | os.PathLike) -> SampledVideo:
    """Memory-map an entry (copy-on-write: callers may modify the tensor, never the file).

    The map is made from the file that was checked, never from a second open of its name.
    """
    with open_entry(path) as f:
        header, meta, offset = _read_header(f, str(path))
        arr = np.memmap(f, dtype=np.uint8, mode="c", offset=offset, shape=tuple(header["frames"]["shape"]))
    import torch

    return SampledVideo(frames=torch.from_numpy(arr), meta=meta)


def open_entry(path: str | os.PathLike) -> BinaryIO:
    """``path`` opened for reading, refused unless it is a regular file.

    ``lstat`` first, and then the open itself neither follows a symbolic link nor waits for a
    writer (``O_NOFOLLOW | O_NONBLOCK``), and ``fstat`` checks what was opened: an entry replaced by a
    named pipe, a device or a link is a :class:`CacheError`, never a read that blocks for ever.
    """
    try:
        cause = not_regular(os.lstat(path).st_mode)
        if cause is None:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
            f = os.fdopen(fd, "rb")
            cause = not_regular(os.fstat(fd).st_mode)  # replaced between the lstat and the open
            if cause is None:
                return f
            f.close()
    except OSError as e:
        raise CacheError(f"{path}: unreadable entry ({e.strerror or type(e).__name__})") from e
    raise CacheError(f"{path}: {cause}")


def _read_header(f: BinaryIO, path: str) -> tuple[dict[str, Any], dict[str, Any], int]:
    # The messages name the entry and what is wrong with it, never the bytes read from it.
    size = os.fstat(f.fileno()).st_size
    raw_len = f.read(8)
    if len(raw_len) < 8:
        raise CacheError(f"{path}: truncated entry (no header)")
    (n,) = struct.unpack("<Q", raw_len)
    if n > min(size - 8, MAX_HEADER_BYTES):
        raise CacheError(f"{path}: corrupt entry (its header length exceeds the file)")
    header = _parse_json(f.read(n), path, "header")
    if not isinstance(header, dict):
        raise CacheError(f"{path}: corrupt entry header (not a JSON object)")
    metadata = header.pop("__metadata__", None)
    meta_blob = metadata.get(METADATA_KEY) if isinstance(metadata, dict) else None
    if not isinstance(meta_blob, str):
        raise CacheError(f"{path}: not an easyvideor1 cache entry (no '{METADATA_KEY}' metadata)")
    meta = _parse_json(meta_blob.encode("utf-8", "surrogatepass"), path, "metadata")
    reason = check_entry(header.get("frames"), meta)
    if reason is not None:
        raise CacheError(f"{path}: {reason}")
    begin, end = header["frames"]["data_offsets"]
    if end - begin != math.prod(header["frames"]["shape"]) or 8 + n + end != size:
        raise CacheError(f"{path}: truncated or corrupt entry (size {size}, expected {8 + n + end})")
    return header, meta, 8 + n + begin


def _parse_json(blob: bytes, path: str, what: str) -> Any:
    try:
        return json.loads(blob)
    except (ValueError, RecursionError) as e:  # not UTF-8, not JSON, or nested past the parser
        raise CacheError(f"{path}: corrupt entry header (its {what} is not JSON)") from e


def check_entry(frames: Any, meta: Any) -> str | None:
    """Why an entry's ``frames`` tensor record and metadata cannot be trusted, or None.

    Types (a shape of floats), ranges (no frames, a frame index outside the video) and finite
    numbers (a ``source_fps`` of 0 or NaN, which every timestamp divides by) are checked here, once,
    so that nothing downstream has to.
    """
    if not isinstance(meta, dict):
        return "corrupt entry header (its metadata is not a JSON object)"
    missing = [k for k in _REQUIRED_META if k not in meta]
    if missing:
        return f"entry metadata lacks {', '.join(missing)}"
    for key, (valid, expected) in _META_FIELDS.items():
        if not valid(meta[key]):
            return f"entry metadata {key} is {_shown(meta[key])}, expected {expected}"
    total, indices = meta["total_frames"], meta["frame_indices"]
    if not isinstance(indices, list) or not all(_whole(i) for i in indices):
        return "entry metadata frame_indices is not a list of whole numbers"
    if not indices:
        return "entry holds no frames"
    outside = next((i for i in indices if not 0 <= i < total), None)
    if outside is not None:
        return f"entry frame index {_shown(outside)} is outside the video's {_shown(total)} frames"
    window = meta.get("window_frames", total)
    if not _whole(window) or not 1 <= window <= total:
        return (
            f"entry metadata window_frames is {_shown(window)}, expected 1 to total_frames ({_shown(total)})"
        )
    times = meta.get("frame_times")
    if times is not None and (
        not isinstance(times, list) or len(times) != len(indices) or not all(_finite(t) for t in times)
    ):
        return "entry metadata frame_times is not one finite time per frame index"
    if not isinstance(frames, dict) or frames.get("dtype") != "U8":
        return "entry has no uint8 [T, H, W, 3] 'frames' tensor"
    shape, offsets = frames.get("shape"), frames.get("data_offsets")
    if not isinstance(shape, list) or len(shape) != 4 or not all(_whole(d) and d >= 0 for d in shape):
        return "entry has no uint8 [T, H, W, 3] 'frames' tensor (its shape is not four whole numbers)"
    if shape[3] != 3:
        return "entry has no uint8 [T, H, W, 3] 'frames' tensor"
    if shape[0] == 0:
        return "entry holds no frames"
    if shape[:3] != [len(indices), meta["height"], meta["width"]]:
        return f"frames shape [{', '.join(map(_shown, shape))}] disagrees with its metadata"
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_whole(o) and o >= 0 for o in offsets):
        return "entry's frames data_offsets are not two whole numbers"
    return None


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _shown(v: Any) -> str:
    """A metadata value for a message: a number as it is (cut short), anything else by its JSON type."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        text = repr(v)
        return text if len(text) <= 24 else f"{text[:20]}..."
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(v), type(v).__name__
    )


# what every metadata field must hold (frame_indices, window_frames, frame_times: in check_entry)
_META_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "source_path": (lambda v: isinstance(v, str), "a path"),
    "source_size": (lambda v: _whole(v) and v >= 0, "a whole number >= 0"),
    "source_mtime_ns": (_whole, "a whole number"),
    "source_fps": (lambda v: _finite(v) and v > 0, "a finite number > 0"),
    "total_frames": (lambda v: _whole(v) and v >= 1, "a whole number >= 1"),
    "sample_fps": (lambda v: _finite(v) and v > 0, "a finite number > 0"),
    "height": (lambda v: _whole(v) and v >= 1, "a whole number >= 1"),
    "width": (lambda v: _whole(v) and v >= 1, "a whole number >= 1"),
    "params": (lambda v: isinstance(v, dict), "an object"),
    "version": (_whole, "a whole number"),
}


def entry_matches(meta: dict[str, Any], video_path: str, params: SamplingParams) -> str | None:
    """Why an entry does not belong to (video, params), or None if it does."""
    if meta.get("version") != FORMAT_VERSION:
        return f"format version {meta.get('version')} != {FORMAT_VERSION}"
    if meta["params"] != params.to_dict():
        return f"sampling parameters differ: cached {meta['params']}, asked {params.to_dict()}"
    path = os.path.abspath(video_path)
    if meta["source_path"] != path:
        return f"entry is for {meta['source_path']}, not {path}"
    if os.path.exists(path):
        st = os.stat(path)
        if (st.st_size, st.st_mtime_ns) != (meta["source_size"], meta["source_mtime_ns"]):
            return "the source video changed since the entry was built"
    return None


@dataclass
class CacheStats:
    hits: int = 0
    decoded: int = 0  # cache misses that fell back to decoding (prefer_cache) or decode_only loads
    fallbacks: list[str] = field(default_factory=list)  # why each prefer_cache miss happened (first 100)


class VideoLoader:
    """Where frames come from: the cache, on-the-fly decoding, or the cache with a fallback.

    Modes (as the reference's ``video_source_mode``):
    - ``prefer_cache``: use a valid entry, else decode and count the fallback in :attr:`stats`;
    - ``cache_only``: a missing or mismatching entry is a :class:`CacheError`;
    - ``decode_only``: ignore the cache.
    """

    def __init__(
        self, cache_dir: str | None = None, mode: str = "prefer_cache", time_limit: float | None = 300.0
    ):
        if mode not in CACHE_MODES:
            raise ConfigError(f"data.cache_mode must be one of {', '.join(CACHE_MODES)}, got {mode!r}")
        if mode == "cache_only" and not cache_dir:
            raise ConfigError("data.cache_mode is cache_only but no data.cache_dir is set")
        if cache_dir and mode != "decode_only" and not os.path.isdir(cache_dir):
            if mode == "cache_only":
                what = "is not a directory" if os.path.exists(cache_dir) else "does not exist"
                raise CacheError(f"cache directory {cache_dir} {what}")
        self.cache_dir, self.mode, self.time_limit = cache_dir, mode, time_limit
        self.stats = CacheStats()
        self._manifest: dict[tuple[str, str], dict[str, Any]] | None = None

    def locate(self, video_path: str, params: SamplingParams) -> Path | None:
        """The entry path for (video, params) if the cache holds one, else None.

        By key first; then through the manifests: for a source this machine cannot see, or a local
        copy of the one the entry was built from (see the module docstring for when that is trusted).
        """
        if not self.cache_dir or self.mode == "decode_only":
            return None
        path = os.path.abspath(video_path)
        row = None
        if os.path.exists(path):
            local = source_identity(path)
            entry = entry_path(self.cache_dir, entry_key(path, params, local))
            if entry.exists():
                return entry
            row = self._manifest_index().get((path, params_key(params)))
            if row is None or row_fits(row, local) is not None:
                return None
        else:  # source not on this machine (cache on shared storage)
            row = self._manifest_index().get((path, params_key(params)))
        if row is None:
            return None
        entry = entry_file(self.cache_dir, row["entry"])
        if entry is None:
            print(
                f"warning: {Path(self.cache_dir) / row['entry']}: the manifest's entry leads out of the "
                "cache directory through a link; not used",
                file=sys.stderr,
            )
        return entry

    def _manifest_index(self) -> dict[tuple[str, str], dict[str, Any]]:
        if self._manifest is None:
            self._manifest = load_index(self.cache_dir)
        return self._manifest

    def load(
        self, video_path: str, params: SamplingParams, entry: str | os.PathLike | None = None
    ) -> SampledVideo:
        """Frames for (video, params). ``entry`` skips the lookup when the caller already has it."""
        if self.mode != "decode_only":
            entry = entry or self.locate(video_path, params)
            reason, cause = ("no cache entry", NO_CACHE_ENTRY) if entry is None else (None, None)
            if entry is not None:
                try:
                    video = read_entry(entry)
                    reason = entry_matches(video.meta, video_path, params)
                    if reason is None:
                        self.stats.hits += 1
                        return video
                    cause = f"{unusable_entry(reason)} {_REBUILD}"
                except CacheError as e:
                    reason = str(e)
                    cause = f"{corrupt_entry(reason)} {_REBUILD}"
            if self.mode == "cache_only":
                raise CacheError(
                    f"{video_path}: {reason} (cache_only mode; run `easyvideor1 preprocess`)", cause=cause
                )
            if len(self.stats.fallbacks) < 100:
                self.stats.fallbacks.append(f"{video_path}: {reason}")
        self.stats.decoded += 1
        try:
            return sample_video(video_path, params, time_limit=self.time_limit)
        except DecodeError:
            raise
        except (OSError, ValueError) as e:
            raise DecodeError(f"{video_path}: {e}") from e
