"""Records whose media cannot be loaded: skipped, listed and counted, unless ``data.strict``.

Records whose text cannot be read (``data/records.py``'s ``UnreadableRecord``: a line that is not
UTF-8 or not JSON, too deep, a lone surrogate) are damaged data the same way: listed at start-up
(``unreadable_row``, no index as they are in no dataset, no media) and counted with them.

One missing or corrupt video used to stop a whole run with a ``DecodeError`` traceback. Now the
record is left out with its reason, one JSON line per record in ``<output_dir>/skipped_records.jsonl``
(``phase`` ``preflight`` for what start-up found, ``step`` for what a later step found, e.g. with
``data.preflight=fast`` or a file deleted mid-run), and counted in the ``data/skipped_records``
metric. With ``data.strict=true`` the first such record stops the run with its error instead.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ..data.dataset import MediaSample, load_media, media_names
from ..data.records import RecordError
from ..errors import UserError
from ..media.failures import NO_CACHE_ENTRY, MediaFailure, missing_media
from ..outdir import open_append
from .distributed import max_over_ranks
from .metrics import rewrite_jsonl

SKIPPED_FILE = "skipped_records.jsonl"


class MediaLoadError(UserError):
    """A record's media cannot be loaded (or its text cannot be read) and ``data.strict`` is set."""


def media_problem(sample: MediaSample, cfg, loader, load: bool = True) -> str | None:
    """Why ``sample``'s media cannot be used, or None.

    With ``load`` the media are loaded (and kept in ``sample.loaded``, so encoding the prompt does
    not load them again); without it only the cheap checks run: cache entries in ``cache_only``
    mode and that every file exists (``data.preflight=fast``).
    """
    # the reasons are media/failures.py's, worded as loading them would word them
    video_names, image_names = media_names(sample)
    if cfg.cache_mode == "cache_only":
        missing = [n for n, e in zip(video_names, sample.video_entries, strict=True) if e is None]
        if missing:
            return MediaFailure(missing[0], NO_CACHE_ENTRY).reason
    if not load:
        names, paths = image_names, sample.images
        if cfg.cache_mode != "cache_only":
            names, paths = video_names + names, sample.videos + paths
        gone = missing_media(names, paths)
        return gone.reason if gone else None
    try:
        sample.loaded = load_media(sample, cfg, loader)
    except MediaFailure as e:
        return e.reason
    return None


def skip_row(
    sample: MediaSample, index: int, reason: str, split: str, phase: str, step: int
) -> dict[str, Any]:
    """One line of ``skipped_records.jsonl``."""
    rec = sample.record
    return {
        "split": split,
        "phase": phase,
        "step": step,
        "index": index,
        "source": rec.source,
        "problem_id": rec.problem_id,
        "media": sample.videos + sample.images,
        "reason": reason,
    }


def unreadable_row(error: RecordError, split: str) -> dict[str, Any]:
    """The ``skipped_records.jsonl`` line of a record whose text cannot be read."""
    return {
        "split": split,
        "phase": "preflight",
        "step": 0,
        "index": None,
        "source": error.source,
        "problem_id": error.record_id,
        "media": [],
        "reason": error.detail,
    }


def strict_error(row: dict[str, Any]) -> MediaLoadError:
    return MediaLoadError(
        f"{row['source']} (problem_id={row['problem_id']}): {row['reason']} "
        "(data.strict=true; set data.strict=false to skip such records)"
    )


def loadable_samples(
    dataset,
    cfg,
    chosen: list[int],
    known_bad: set[int],
    step: int,
    skip_log: SkipLog,
    ready: dict[int, MediaSample] | None = None,
) -> tuple[list[MediaSample], list[dict[str, Any]]]:
    """(the samples of ``chosen`` whose media load (loaded now, once), the rows of those skipped).

    ``dataset`` is the training set, ``cfg`` the data config, ``step`` the step being drawn for;
    indices in ``known_bad`` failed before and are passed over (listed once, not retried). The
    skipped rows are written to ``skip_log`` here, before any stop, so the error can point there;
    under ``data.strict`` the first failure stops the run. Preflight found the bad files it could;
    this catches the rest (``data.preflight=fast``, a file deleted or damaged mid-run).
    ``ready`` holds samples whose media were loaded ahead (``trainer/prefetch.py``): they are not
    loaded again (one whose loading failed there is, here, so its failure is handled as ever).
    """
    samples, rows, error = [], [], None
    for i in chosen:
        if i in known_bad:
            continue  # failed before: listed once, not retried
        sample = (ready or {}).get(i)
        if sample is not None and sample.loaded is not None:
            samples.append(sample)
            continue
        sample = dataset[i]
        reason = media_problem(sample, cfg, dataset.loader)
        if reason is None:
            samples.append(sample)
            continue
        row = skip_row(sample, i, reason, "train", "step", step)
        if cfg.strict:
            error = strict_error(row)
            break
        rows.append(row)
    skip_log.write(rows)
    if error is None and not samples:
        error = ValueError(
            f"no record of this step could be loaded ({len(chosen)} tried), e.g. "
            f"{rows[0]['source'] if rows else chosen[0]}: see skipped_records.jsonl"
        )
    # every rank calls this at the same point: a rank that stops alone would leave the others
    # waiting in the step's next collective forever, so the stop is agreed on and shared
    if max_over_ranks(int(error is not None)):
        raise error or MediaLoadError(
            "another rank stopped the run: a record of its share of this step could not be loaded "
            "(its error and skipped_records.jsonl say which)"
        )
    return samples, rows


class SkipLog:
    """Appends rows to ``<output_dir>/skipped_records.jsonl`` (one write per row, so ranks that append
    at the same time do not interleave within a line)."""

    def __init__(self, output_dir: str):
        self.path = os.path.join(output_dir, SKIPPED_FILE)

    def start(self) -> None:
        """A new start: drop the previous start's preflight rows (this one re-checks every record)."""
        rewrite_jsonl(self.path, lambda row: row.get("phase") != "preflight")

    def truncate_after(self, step: int) -> None:
        """After a resume from ``step``: drop the rows of steps that will run again."""
        rewrite_jsonl(self.path, lambda row: row.get("phase") != "step" or row.get("step", 0) <= step)

    def write(self, rows: list[dict[str, Any]]) -> None:
        if not rows:
            return
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        with open_append(self.path, binary=True) as f:
            for row in rows:
                f.write((json.dumps(row) + "\n").encode("utf-8"))
