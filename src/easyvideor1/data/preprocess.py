"""``easyvideor1 preprocess``: decode every video of some data files once, into the frame cache.

It reads records, so it lives in ``data`` (which uses ``media``; ``media`` never imports ``data``).

Train and eval files go in together; each (video, sampling parameters) pair is built once however
many records share it. The job is resumable (valid entries are reused), shardable over machines
(``shard=(i, n)`` takes the videos whose path hashes to ``i``), and keeps going past bad input:
every failure is written to ``failures.jsonl`` with the record and the reason. Image and text
records are not failures. Outputs in the cache dir: the entries, ``manifest.jsonl`` (one line per
video, merged with the lines of earlier and concurrent runs: see :mod:`easyvideor1.media.manifest`), and this run's
``report.json`` (counts, bytes, seconds) and ``failures.jsonl``.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import sys
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from ..media.cache import (
    CacheError,
    entry_key,
    entry_matches,
    entry_path,
    params_key,
    read_header,
    write_entry,
)
from ..media.failures import MediaFailure
from ..media.identity import SourceIdentity, source_identity
from ..media.manifest import manifest_name, write_merged
from ..media.sampling import SamplingParams
from ..media.video import sample_video
from ..media.workers import run_tasks
from ..outdir import check_writable, write_text_atomic
from .config import DataConfig
from .records import RecordError, load_records


@dataclass
class VideoJob:
    """One (video, sampling parameters) pair and the records that use it."""

    source_path: str
    params: SamplingParams
    record_ids: list[str] = field(default_factory=list)
    entry: str | None = None  # relative to the cache dir
    status: str = "pending"  # built | reused | failed
    reason: str = ""
    bytes: int = 0
    identity: SourceIdentity | None = None  # taken before decoding; the key and the manifest use it


def resolve_media_path(path: str, data_file: str, video_root: str | None) -> str:
    if path.startswith("file://"):
        path = path[7:]
    if os.path.isabs(path):
        return os.path.normpath(path)
    base = video_root if video_root else os.path.dirname(os.path.abspath(data_file))
    return os.path.normpath(os.path.join(base, path))


def _in_shard(path: str, shard: tuple[int, int] | None) -> bool:
    if shard is None:
        return True
    i, n = shard
    return int(hashlib.sha1(path.encode()).hexdigest()[:8], 16) % n == i


# Each worker writes an entry in a background thread while it decodes the next video: the fsync of a
# 30 MB entry is mostly waiting on the disk, and overlapping it with decoding keeps the core busy.
# At most one write is pending per worker; the parent checks every entry once the pool is done.
_writer: ThreadPoolExecutor | None = None
_pending: tuple[str, Future] | None = None


def _reset_writer_after_fork() -> None:
    # A forked worker inherits the executor object but not its thread: never reuse it.
    global _writer, _pending
    _writer, _pending = None, None


os.register_at_fork(after_in_child=_reset_writer_after_fork)


def _finish_pending_write() -> str | None:
    """Wait for this worker's pending write; returns "<entry>\t<error>" if it failed."""
    global _pending
    if _pending is None:
        return None
    entry, future = _pending
    _pending = None
    try:
        future.result()
    except Exception as e:  # reported through the next result, and caught by the final check anyway
        return f"{entry}\t{type(e).__name__}: {e}"
    return None


def _build(arg: tuple[str, dict, str, float]) -> dict[str, Any]:
    """Worker body: decode one video; its entry is written (atomically) in the background."""
    global _writer, _pending
    source, params, entry, time_limit = arg
    t0 = time.monotonic()
    previous_error = _finish_pending_write()
    video = sample_video(source, SamplingParams.from_dict(params), time_limit=time_limit)
    if _writer is None:
        _writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="entry-writer")
    _pending = (entry, _writer.submit(write_entry, entry, video))
    return {
        "frames": int(video.frames.shape[0]),
        "seconds": time.monotonic() - t0,
        "previous_write_error": previous_error,
    }


def _flush_writes() -> None:
    error = _finish_pending_write()
    if error:
        print(f"preprocess: writing {error}", file=sys.stderr)


_LOST_WRITE = "entry was not written completely"


def _run_builds(jobs: list[VideoJob], todo: list, root: Path, workers: int, time_limit: float, bar) -> int:
    """Build ``todo`` in the pool, then trust only entries that are really there and complete."""
    built_frames = 0
    write_errors: dict[str, str] = {}
    for i, ok, result in run_tasks(_build, todo, workers, time_limit, on_exit=_flush_writes):
        job = jobs[i]
        if ok:
            job.status = "built"
            built_frames += result["frames"]
            if result.get("previous_write_error"):
                entry, reason = result["previous_write_error"].split("\t", 1)
                write_errors[entry] = reason
        else:
            job.status, job.reason = "failed", result
        bar.update(1)
        bar.set_postfix(failed=sum(j.status == "failed" for j in jobs), refresh=False)
    for i, _ in todo:
        job = jobs[i]
        if job.status != "built":
            continue
        entry = root / job.entry
        try:
            read_header(entry)
            job.bytes = entry.stat().st_size
        except (CacheError, OSError) as e:
            job.status = "failed"
            job.reason = write_errors.get(str(entry)) or f"{_LOST_WRITE} ({e})"
    return built_frames


def _params_for_worker(params: SamplingParams) -> dict:
    # The raw dataclass fields (None = default), so the worker rebuilds exactly the same params.
    return {k: getattr(params, k) for k in params.__dataclass_fields__}


def collect_jobs(
    data_files: list[str],
    cfg: DataConfig,
    shard: tuple[int, int] | None,
    failures: list[dict],
    tracks: Sequence[SamplingParams] = (),
) -> tuple[list[VideoJob], dict[str, int]]:
    """Read records, validate them, and group their videos into unique jobs (one per video and
    parameters: the record's frames, and each of ``tracks`` for every video)."""
    jobs: dict[tuple[str, str], VideoJob] = {}
    counts = {"records": 0, "video_records": 0, "image_records": 0, "text_records": 0, "bad_records": 0}
    for data_file in data_files:
        errors: list[RecordError] = []
        records = load_records(data_file, errors)
        for e in errors:
            failures.append({"record": e.record_id, "source": e.source, "path": None, "reason": str(e)})
        counts["bad_records"] += len(errors)
        counts["records"] += len(records) + len(errors)
        for rec in records:
            kind = "video" if rec.videos else "image" if rec.images else "text"
            counts[f"{kind}_records"] += 1
            if not rec.videos:
                continue  # images are loaded on the fly; text needs nothing
            try:
                params = cfg.sampling_params(rec)
            except ValueError as e:
                failures.append(
                    {"record": rec.problem_id, "source": rec.source, "path": None, "reason": str(e)}
                )
                continue
            for video in rec.videos:
                path = resolve_media_path(video, data_file, cfg.video_root)
                if not _in_shard(path, shard):
                    continue
                for p in (params, *tracks):
                    key = (path, params_key(p))
                    job = jobs.setdefault(key, VideoJob(source_path=path, params=p))
                    job.record_ids.append(rec.problem_id)
    return list(jobs.values()), counts


def _clean_stale_temp_files(cache_dir: Path) -> int:
    """Remove temporary files left by killed writers of this host (never another host's)."""
    host, removed = socket.gethostname(), 0
    for tmp in [*cache_dir.glob(f"*/*.tmp.{host}.*"), *cache_dir.glob(f"manifest*.tmp.{host}.*")]:
        pid = tmp.name.rsplit(".", 1)[-1]
        if pid.isdigit() and not _writer_alive(int(pid), tmp):
            tmp.unlink(missing_ok=True)
            removed += 1
    return removed


def _writer_alive(pid: int, tmp: Path) -> bool:
    """Whether process ``pid`` may still be writing ``tmp``.

    A killed writer can linger as a zombie when its parent died and the container's init does not
    reap orphans, and its pid can be reused by an unrelated process; neither is writing. On Linux
    both show in ``/proc``: state ``Z``, or a start time after the file was last written.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            return False
        with open("/proc/stat", encoding="ascii") as f:
            boot = next(float(line.split()[1]) for line in f if line.startswith("btime"))
        started = boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return started <= tmp.stat().st_mtime + 1.0
    except (OSError, ValueError, IndexError, StopIteration):
        return True  # no /proc (not Linux): trust the signal check


def preprocess(
    data_files: list[str],
    cfg: DataConfig,
    cache_dir: str,
    workers: int = 1,
    shard: tuple[int, int] | None = None,
    progress: bool = True,
    tracks: Sequence[SamplingParams] = (),
) -> dict[str, Any]:
    """Build the cache for ``data_files``; returns the report (also written to ``report.json``).

    ``tracks``: more entries per video (the frame tracks of the configured tools,
    :func:`easyvideor1.tools.session.tool_tracks`)."""
    t0 = time.monotonic()
    # not held (outdir.hold): runs on one cache overlap on purpose, each merging its manifest rows
    root = check_writable(cache_dir, "--cache-dir")
    stale = _clean_stale_temp_files(root)
    failures: list[dict] = []
    jobs, counts = collect_jobs(data_files, cfg, shard, failures, tracks)

    todo: list[tuple[int, tuple]] = []
    for i, job in enumerate(jobs):
        try:
            job.identity = source_identity(job.source_path)
            key = entry_key(job.source_path, job.params, job.identity)
        except FileNotFoundError:
            job.status, job.reason = "failed", "file not found"
            continue
        except MediaFailure as e:  # not a regular file: never opened, so it cannot block
            job.status, job.reason = "failed", e.cause
            continue
        except OSError as e:
            job.status, job.reason = "failed", f"cannot read file ({e.strerror})"
            continue
        entry = entry_path(root, key)
        job.entry = str(entry.relative_to(root))
        if entry.exists():
            try:
                _, meta, _ = read_header(entry)
                reason = entry_matches(meta, job.source_path, job.params)
            except CacheError as e:
                reason = str(e)
            if reason is None:
                job.status, job.bytes = "reused", entry.stat().st_size
                continue
        todo.append((i, (job.source_path, _params_for_worker(job.params), str(entry), cfg.decode_time_limit)))

    bar = tqdm(total=len(todo), unit="video", desc="preprocess", disable=not progress, dynamic_ncols=True)
    built_frames = 0
    for attempt in range(2):
        built_frames += _run_builds(jobs, todo, root, workers, cfg.decode_time_limit, bar)
        # A worker killed (time limit, crash) while its previous entry was still being written loses
        # that write; such videos decoded fine, so they get one more try.
        todo = [t for t in todo if jobs[t[0]].reason.startswith(_LOST_WRITE)]
        if not todo or attempt == 1:
            break
        for i, _ in todo:
            jobs[i].status, jobs[i].reason = "pending", ""
    bar.close()

    for job in jobs:
        if job.status == "failed":
            for rid in job.record_ids:
                failures.append({"record": rid, "path": job.source_path, "reason": job.reason})
    suffix = "" if shard is None else f".shard-{shard[0]}-of-{shard[1]}"
    host, now = socket.gethostname(), time.time()
    rows = [
        {
            "source_path": j.source_path,
            "params_key": params_key(j.params),
            "entry": j.entry if j.status != "failed" else None,
            "status": j.status,
            "reason": j.reason or None,
            "records": len(j.record_ids),
            "source": j.identity.to_dict() if j.identity else None,
            "host": host,
            "time": now,
        }
        for j in jobs
    ]
    manifest_rows = write_merged(root, manifest_name(shard), rows)
    write_text_atomic(root / f"failures{suffix}.jsonl", "".join(json.dumps(f) + "\n" for f in failures))
    report = {
        **counts,
        "videos": len(jobs),  # entries: one per video and parameters (tool tracks included)
        "tool_tracks": len(tracks),
        "built": sum(j.status == "built" for j in jobs),
        "reused": sum(j.status == "reused" for j in jobs),
        "failed": sum(j.status == "failed" for j in jobs),
        "failures": len(failures),
        "bytes": sum(j.bytes for j in jobs),
        "built_frames": built_frames,
        "seconds": round(time.monotonic() - t0, 3),
        "workers": workers,
        "shard": list(shard) if shard else None,
        "stale_temp_files_removed": stale,
        "manifest_rows": manifest_rows,  # this run's and earlier runs' (merged)
        "cache_dir": str(root.resolve()),
    }
    write_text_atomic(root / f"report{suffix}.json", json.dumps(report, indent=2) + "\n")
    return report


def format_report(report: dict[str, Any]) -> str:
    gib = report["bytes"] / 2**30
    lines = [
        f"cache: {report['cache_dir']}",
        f"records: {report['records']} ({report['video_records']} video, {report['image_records']} image, "
        f"{report['text_records']} text, {report['bad_records']} malformed)",
        f"videos: {report['videos']} unique: {report['built']} built, {report['reused']} reused, "
        f"{report['failed']} failed",
        f"size: {gib:.3f} GiB, time: {report['seconds']:.1f} s",
    ]
    if report["failures"]:
        lines.append(f"{report['failures']} failure(s) listed in failures.jsonl (each with its reason)")
    return "\n".join(lines)
