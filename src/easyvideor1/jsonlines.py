"""Reading JSON lines robustly: a line that cannot be read is that line's failure, never the file's.

A line that is not valid UTF-8, not JSON, or JSON nested deeper than Python's parser goes becomes an
:class:`UnreadableRecord` naming ``file:line`` (and the line's ``problem_id`` when it can still be
seen); the other lines are read. Every reader of JSON lines (data records, predictions, the frame
cache's manifests) reads through :func:`json_lines`, so all of them agree on what a readable line is.
:class:`RecordError` is the user error for a record that cannot be used (``data/records.py`` checks
the fields). A foundation module: it imports nothing of the package but :mod:`easyvideor1.errors`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from .errors import UserError

BOM = b"\xef\xbb\xbf"  # files saved by Windows tools start with a byte-order mark, which is not JSON
_TOO_DEEP = "nested deeper than Python can parse (too many [ or { levels)"


class RecordError(UserError):
    """A record that cannot be used; ``str()`` names the file, the position and the field."""

    def __init__(self, source: str, reason: str, field_name: str | None = None, record_id: str | None = None):
        # an id or field name may itself hold a lone surrogate: escaped, so the error can be printed
        source, reason = printable(source), printable(reason)
        field_name = None if field_name is None else printable(field_name)
        record_id = None if record_id is None else printable(record_id)
        self.source, self.reason, self.field, self.record_id = source, reason, field_name, record_id
        where = f"{source}" + (f" (problem_id={record_id})" if record_id else "")
        super().__init__(f"{where}: " + self.detail)

    @property
    def detail(self) -> str:
        """The error without its source: ``field 'x': reason`` (or the reason)."""
        return (f"field '{self.field}': " if self.field else "") + self.reason


class UnreadableRecord(RecordError):
    """A record whose text cannot be read: not valid UTF-8, not JSON, nested too deep, or holding
    a lone surrogate. Damaged data, like a corrupt video: batch jobs and training skip and list it."""


def printable(text: str) -> str:
    """``text`` with lone surrogates written as ``\\udXXX`` escapes (so it can be encoded)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def split_lines(path: str) -> Iterator[tuple[int, bytes]]:
    """``(line number, bytes with their ending)`` of a text file, split where text mode splits
    (``\\n``, ``\\r\\n``, ``\\r``), a leading byte-order mark dropped; read in chunks, as bytes, so
    one undecodable line is that line's problem."""
    lineno, pending = 0, b""
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            if lineno == 0 and not pending:
                chunk = chunk.removeprefix(BOM)
            parts = (pending + chunk).splitlines(keepends=True)
            # the last part is unfinished unless it ends in \n (a \r may be half of a \r\n)
            pending = parts.pop() if parts and not parts[-1].endswith(b"\n") else b""
            for part in parts:
                lineno += 1
                yield lineno, part
    if pending:
        yield lineno + 1, pending


def decode_line(data: bytes, where: str) -> str:
    """One line as text; :class:`UnreadableRecord` at the first byte that is not UTF-8 (naming the
    record's ``problem_id`` when the rest of the line still reads as a record)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        column = len(data[: e.start].decode("utf-8", "replace")) + 1
        reason = f"not valid UTF-8 (byte 0x{data[e.start]:02x} at column {column})"
        raise UnreadableRecord(where, reason, record_id=_id_of(data.decode("utf-8", "replace"))) from None


def _id_of(text: str) -> str | None:
    """The ``problem_id`` (or ``id``) of a damaged line, if it can be seen at all (for the error only)."""
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        return None
    rid = raw.get("problem_id", raw.get("id")) if isinstance(raw, dict) else None
    return None if rid is None or isinstance(rid, (dict, list)) else str(rid)


def parse_json(text: str, where: str) -> Any:
    """A JSON value, or :class:`UnreadableRecord` for text that is not JSON or is nested too deep."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        at = f"line {e.lineno} column {e.colno}" if e.lineno > 1 else f"column {e.colno}"
        raise UnreadableRecord(where, f"invalid JSON ({e.msg} at {at})") from None
    except RecursionError:
        raise UnreadableRecord(where, _TOO_DEEP) from None


def json_lines(path: str) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for every non-blank line of a JSONL file; ``value`` is the
    :class:`UnreadableRecord` for a line that is not UTF-8, not JSON, or not text all through."""
    for lineno, data in split_lines(path):
        where = f"{path}:{lineno}"
        try:
            text = decode_line(data, where)
            if not text.strip():
                continue
            value = parse_json(text, where)
        except UnreadableRecord as e:
            yield lineno, e
            continue
        yield lineno, value
