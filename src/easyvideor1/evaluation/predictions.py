"""``predictions.jsonl``: one JSON line per evaluated sample, appended and flushed as samples finish.

Reading is forgiving by design: a line cut by a kill, a line that is not a sample row (``[]``, a
number, an object without ``sample_id``), a line that is not text (not UTF-8, a lone surrogate
escape, nested too deep: ``data/records.py``'s rules) is skipped and counted, never a traceback;
the sample it would have described is simply evaluated again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..data.records import RecordError, text_problem
from ..jsonlines import json_lines
from ..outdir import open_append


@dataclass
class PredictionFile:
    """The usable rows of a predictions file (last row per sample id wins) and what was skipped."""

    rows: dict[str, dict] = field(default_factory=dict)
    skipped_lines: int = 0


def iter_rows(path: str) -> Iterator[dict | None]:
    """Each line's row, or None for a line that is not a sample row."""
    for _, row, _why in read_lines(path):
        yield row


def read_lines(path: str) -> Iterator[tuple[int, dict | None, str | None]]:
    """``(line number, row, None)`` for each sample row, ``(line number, None, why)`` for each
    non-blank line that is not one."""
    for lineno, value in json_lines(path):
        if isinstance(value, RecordError):
            yield lineno, None, value.reason
        elif not isinstance(value, dict) or not isinstance(value.get("sample_id"), str):
            yield lineno, None, "not a JSON object with a string 'sample_id'"
        elif (problem := text_problem(value)) is not None:
            # a response no file, digest or scorer can encode: a bad row, not a crash mid-write
            yield lineno, None, f"field '{problem[0]}': {problem[1]}"
        else:
            yield lineno, value, None


def read_predictions(path: str, settings: str | None = None) -> PredictionFile:
    """Rows of ``path`` (all of them, or only those recorded under the ``settings`` digest)."""
    out = PredictionFile()
    if not os.path.exists(path):
        return out
    for row in iter_rows(path):
        if row is None:
            out.skipped_lines += 1
        elif settings is None or row.get("settings") == settings:
            out.rows[row["sample_id"]] = row
    return out


class PredictionWriter:
    """Appends rows durably: each batch is flushed and fsynced before the next is generated
    (``outdir.open_append``: never through a symbolic link planted at ``path``)."""

    def __init__(self, path: str):
        self.path = path
        self._f = open_append(path)
        if self._f.tell() and not _ends_with_newline(path):
            self._f.write("\n")  # a kill cut the last line: never glue a new row onto it

    def write(self, rows: list[dict]) -> None:
        for row in rows:
            self._f.write(json.dumps(row, ensure_ascii=False) + "\n")
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> PredictionWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _ends_with_newline(path: str) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"
