"""The cache's manifests: one JSON line per (video, sampling parameters), merged across runs.

``preprocess`` writes ``manifest.jsonl`` (``manifest.shard-I-of-N.jsonl`` with ``--shard``). Runs on
one cache directory, one after the other or at the same time (train and eval files, shards), must
all stay listed: a run merges its rows into the file instead of replacing it. The merge holds an
exclusive ``flock`` on ``manifest.lock`` around read -> merge -> write temporary -> fsync -> rename,
so two runs never lose each other's rows (Linux NFS clients implement ``flock`` with NFS locks; a
filesystem without locks gets a warning and an unlocked merge). Merge rules: a row of this run
replaces the row for the same (source path, parameters key); older rows stay unless the entry file
they name was removed.

Row fields: ``source_path``, ``params_key``, ``entry`` (relative to the cache dir, ``None`` when
failed; a row naming a file outside the directory is skipped with a warning, never opened), ``status`` (built | reused | failed), ``reason``, ``records``, ``source`` (the
:class:`~easyvideor1.media.identity.SourceIdentity` the entry was keyed on), ``host`` (the machine
that read the source) and ``time`` (unix seconds of the run; the newest row wins across files).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

from ..jsonlines import RecordError, json_lines
from ..outdir import writing
from .identity import SourceIdentity

MANIFEST_GLOB = "manifest*.jsonl"
LOCK_NAME = "manifest.lock"
_USABLE = ("built", "reused")


def manifest_name(shard: tuple[int, int] | None) -> str:
    return "manifest.jsonl" if shard is None else f"manifest.shard-{shard[0]}-of-{shard[1]}.jsonl"


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of one manifest file; a malformed line (not UTF-8, not JSON, not a row) is skipped
    with a warning naming it. Lone surrogates are fine here: rows are written ASCII-escaped and a
    file name that is not UTF-8 is one (Python's surrogateescape)."""
    rows = []
    for n, row in json_lines(str(path)):
        try:
            if isinstance(row, RecordError):
                raise ValueError(row.reason)
            if not isinstance(row, dict) or not isinstance(row.get("source_path"), str):
                raise ValueError("not a manifest row (no source_path)")
            if not isinstance(row.get("params_key"), str):
                raise ValueError("not a manifest row (no params_key)")
            problem = row_problem(row)
            if problem is not None:
                raise ValueError(problem)
        except ValueError as e:
            print(f"warning: {path}:{n}: skipped ({e})", file=sys.stderr)
            continue
        rows.append(row)
    return rows


def row_problem(row: dict[str, Any]) -> str | None:
    """Why a row's fields cannot be trusted, or None. A manifest is untrusted input: its ``entry``
    must name a file inside the cache directory, judged on the text alone (nothing it names is
    opened or even looked at), and its ``time`` must be a finite number."""
    entry = row.get("entry")
    if entry is not None:
        if not isinstance(entry, str) or not entry or "\0" in entry:
            return "its entry is not a path"
        parts = PurePosixPath(entry).parts
        if PurePosixPath(entry).is_absolute() or ".." in parts:
            return f"its entry {_cut(entry)!r} is outside the cache directory"
    t = row.get("time")
    if t is not None and not (isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t)):
        return "its time is not a finite number"
    return None


def entry_file(cache_dir: str | os.PathLike, entry: str) -> Path | None:
    """``cache_dir / entry`` when it resolves inside ``cache_dir``; None when a link on the way
    (a planted ``ab -> /etc`` fan-out folder) leads out of it. Only links are resolved: the file
    itself is not opened here."""
    root = os.path.realpath(cache_dir)
    target = os.path.realpath(os.path.join(root, entry))
    if os.path.commonpath([root, target]) != root or target == root:
        return None
    return Path(cache_dir) / entry


def _cut(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else f"{text[:limit]}..."


def _key(row: dict[str, Any]) -> tuple[str, str]:
    return row["source_path"], row["params_key"]


def merge_rows(cache_dir: Path, old: list[dict], new: list[dict]) -> list[dict]:
    """``new`` over ``old`` by (source path, params key); old rows whose entry file is gone dropped."""
    merged: dict[tuple[str, str], dict] = {}
    for row in old:
        entry = row.get("entry")
        if row.get("status") in _USABLE and (not entry or not (cache_dir / entry).is_file()):
            continue  # its entry was removed (pruned cache): nothing left to point at
        merged[_key(row)] = row
    for row in new:
        merged[_key(row)] = row
    return [merged[k] for k in sorted(merged)]


@contextlib.contextmanager
def _locked(cache_dir: Path) -> Iterator[None]:
    import fcntl

    with open(cache_dir / LOCK_NAME, "a") as lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        except OSError as e:  # e.g. a FUSE filesystem without locks
            print(f"warning: cannot lock {cache_dir / LOCK_NAME} ({e}); merging unlocked", file=sys.stderr)
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def write_merged(cache_dir: str | os.PathLike, name: str, rows: list[dict]) -> int:
    """Merge ``rows`` into ``cache_dir/name`` under the lock, atomically; returns the row count."""
    root = Path(cache_dir)
    path = root / name
    with _locked(root):
        old = read_rows(path) if path.exists() else []
        merged = merge_rows(root, old, rows)
        tmp = path.with_name(f"{name}.tmp.{socket.gethostname()}.{os.getpid()}")
        try:
            with writing(path):  # a full disk: one line naming the manifest, which stays as it was
                with open(tmp, "w", encoding="utf-8") as f:
                    f.writelines(json.dumps(r) + "\n" for r in merged)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    return len(merged)


def load_index(cache_dir: str | os.PathLike) -> dict[tuple[str, str], dict[str, Any]]:
    """Usable rows (built or reused, with an entry) of every manifest, by (source path, params key)."""
    index: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(Path(cache_dir).glob(MANIFEST_GLOB)):
        for row in read_rows(path):
            if row.get("status") not in _USABLE or not row.get("entry"):
                continue
            held = index.get(_key(row))
            if held is None or _time(row) >= _time(held):
                index[_key(row)] = row
    return index


def _time(row: dict[str, Any]) -> float:
    t = row.get("time")  # finite when set: read_rows checked it
    return float(t) if isinstance(t, int | float) else 0.0


def row_fits(row: dict[str, Any], local: SourceIdentity, host: str | None = None) -> str | None:
    """Why a manifest row's entry must not serve the local file ``local``, or None if it may.

    Only asked after the key missed, i.e. some part of the identity differs. A copy of the file on
    another machine or filesystem (``rsync -a``, per-node dataset copies) has its own inode and
    ctime: it is accepted when size, mtime and the sampled digest match. The machine and device
    that built the entry, or the same inode seen through shared storage, can tell a rewrite or a
    replacement apart, so there a miss stands.
    """
    try:
        built = SourceIdentity.from_dict(row.get("source") or {})
    except ValueError as e:
        return f"manifest row has no usable source identity ({e})"
    if (built.size, built.mtime_ns, built.digest) != (local.size, local.mtime_ns, local.digest):
        return "the source video changed since the entry was built (size, mtime or content)"
    if built.inode == local.inode and built.ctime_ns != local.ctime_ns:
        return "the source video was rewritten in place since the entry was built (ctime changed)"
    if row.get("host") == (host or socket.gethostname()) and built.dev == local.dev:
        return "the source video was replaced or rewritten since the entry was built (inode/ctime changed)"
    return None
