"""The record schema: one training or evaluation example, read from JSON, JSONL or Parquet.

A record is the reference's schema (problem, answer, videos, images, data_type, problem_type,
options, offline_output, problem_id, free extra fields) plus clip windows (``video_start``,
``video_end``) and per-record ``fps`` / ``max_frames`` overrides. Benchmark annotation files use
other names (``solution``, ``path``, ``image_path``); they are mapped here so every consumer sees
one schema. Records are validated one by one, so a field may have different types across records
(the reference's arrow loading rejected that), and each error names file, position and field.

Text that is not text is that record's failure, never the job's: a JSONL line that is not valid
UTF-8 or not JSON, JSON nested deeper than Python's parser goes, or a string holding a lone
surrogate escape (``"\\ud800"`` is valid JSON but no file, digest or tokenizer can encode it).
These raise :class:`UnreadableRecord`, which jobs that skip damaged media skip the same way. The
reading itself (and the two error types) is :mod:`easyvideor1.jsonlines`, shared with every other
reader of JSON lines in the project (predictions, the frame cache's manifests), so that all of them
agree on what a readable line is.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..jsonlines import BOM, RecordError, UnreadableRecord, json_lines, parse_json

# Python's json parser recurses once per level; records nested deeper than this are refused so
# that every later json.dumps, digest or Arrow conversion (called from deeper stacks) works too.
MAX_DEPTH = 200


def text_problem(value: Any) -> tuple[str, str] | None:
    """(where, what) for the first string in ``value`` (keys included) that holds a lone surrogate
    or the first place nested deeper than :data:`MAX_DEPTH`; None when all of it is text.

    ``where`` is a path such as ``meta.tags[2]`` for a string (empty for ``value`` itself), the
    top-level field for too deep nesting (its full path would be hundreds of ``[0]``). Iterative,
    so the check itself never runs out of stack.
    """
    todo: list[tuple[Any, str, int]] = [(value, "", 0)]
    while todo:
        item, where, depth = todo.pop()
        if isinstance(item, str):
            bad = _surrogate_at(item)
            if bad is not None:
                return (
                    where,
                    f"lone surrogate {_escaped(item[bad])} at character {bad + 1} (not valid Unicode)",
                )
        elif isinstance(item, (dict, list)):
            if depth >= MAX_DEPTH:
                top = where.split(".")[0].split("[")[0]
                return top, f"nested deeper than {MAX_DEPTH} levels"
            if isinstance(item, dict):
                children = []
                for k, v in item.items():
                    name = f"{where}.{k}" if where else str(k)
                    bad = _surrogate_at(k) if isinstance(k, str) else None
                    if bad is not None:
                        return name, f"a key with a lone surrogate {_escaped(k[bad])} (not valid Unicode)"
                    children.append((v, name, depth + 1))
            else:
                children = [(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(item)]
            todo.extend(reversed(children))  # depth-first, in order: the first problem is reported
    return None


def _escaped(char: str) -> str:
    return f"\\u{ord(char):04x}"


def _surrogate_at(text: str) -> int | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return e.start
    return None


@dataclass
class Record:
    """One example. ``source`` is ``file:line`` (JSONL) or ``file[index]`` (JSON array, Parquet)."""

    problem: str
    answer: str = ""
    videos: list[str] = field(default_factory=list)
    images: list[str] = field(default_factory=list)
    data_type: str = ""
    problem_type: str = ""
    options: list[str] | None = None
    offline_output: str | None = None
    # an offline episode (tools): the policy's turns; the calls in them are run when it is used,
    # so the tool results between the turns are the tools' own
    offline_turns: list[str] | None = None
    problem_id: str = ""
    video_start: float | None = None
    video_end: float | None = None
    fps: float | None = None
    max_frames: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    source: str = ""

    @property
    def modalities(self) -> tuple[str, ...]:
        return tuple(m for m, items in (("image", self.images), ("video", self.videos)) if items) or ("text",)

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in _FIELDS if k != "extra"}
        d.update(self.extra)
        return d


_FIELDS = (
    "problem answer videos images data_type problem_type options offline_output offline_turns problem_id "
    "video_start video_end fps max_frames extra"
).split()

# Benchmark-file names -> record names. ``solution`` wins over ``answer`` when both exist: in the
# benchmark files ``answer`` holds the option text and ``solution`` the gold in scorable form.
_ALIASES = {
    "solution": "answer",
    "path": "videos",
    "video_path": "videos",
    "image_path": "images",
    "video_fps": "fps",
    "video_max_frames": "max_frames",
    "question": "problem",
}
_PREFERRED = {"answer": "solution", "videos": "videos", "problem": "problem"}


def _as_str(value: Any, src: str, name: str, rid: str | None, allow_none: bool = False) -> str | None:
    if value is None:
        if allow_none:
            return None
        raise RecordError(src, "expected a string, got null", name, rid)
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "Yes" if value else "No"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, (dict, list)) and name == "answer":
        return json.dumps(value)  # grounding answers may be given as JSON objects
    raise RecordError(src, f"expected a string, got {type(value).__name__}", name, rid)


def _as_paths(value: Any, src: str, name: str, rid: str | None) -> list[str]:
    if value is None or value == "":
        return []
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise RecordError(src, f"expected a path or a list of paths, got {type(value).__name__}", name, rid)
    for i, p in enumerate(items):
        if not isinstance(p, str) or not p.strip():
            raise RecordError(src, f"item {i} must be a non-empty path string, got {p!r}", name, rid)
    return list(items)


def _as_number(value: Any, src: str, name: str, rid: str | None, integer: bool = False) -> float | int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RecordError(src, f"expected a finite number, got {value!r}", name, rid)
    if value < 0:
        raise RecordError(src, f"must be >= 0, got {value}", name, rid)
    if integer:
        if int(value) != value or value < 1:
            raise RecordError(src, f"expected a positive integer, got {value!r}", name, rid)
        return int(value)
    return float(value)


def parse_record(raw: Any, source: str) -> Record:
    """Validate one raw record (a dict) and return a :class:`Record`, or raise :class:`RecordError`."""
    if not isinstance(raw, dict):
        raise RecordError(source, f"a record must be a JSON object, got {type(raw).__name__}")
    rid_raw = raw.get("problem_id", raw.get("id"))
    rid = None if rid_raw is None else str(rid_raw)
    problem = text_problem(raw)  # every field, extra and nested ones too: all of it reaches outputs
    if problem is not None:
        raise UnreadableRecord(source, problem[1], problem[0] or None, rid)
    values: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, value in raw.items():
        name = _ALIASES.get(key, key)
        if value is None and name in _FIELDS:
            continue  # null means absent (Parquet fills missing columns with nulls)
        if name in _FIELDS and name != "extra":
            if name in values and _PREFERRED.get(name) not in (None, key):
                extra.setdefault(key, value)  # keep the non-preferred spelling for reference
                continue
            if name in values and _PREFERRED.get(name) == key:
                extra.setdefault(_reverse_key(raw, name, key), values[name])
            values[name] = value
        elif key == "video" and "path" not in raw and "videos" not in raw:
            values["videos"] = value
        else:
            extra[key] = value
    if "problem" not in values and "prompt" in extra:
        values["problem"] = extra.pop("prompt")

    problem = _as_str(values.get("problem", ""), source, "problem", rid)
    options = values.get("options")
    if options is not None:
        if not isinstance(options, list):
            raise RecordError(
                source, f"expected a list of strings or null, got {type(options).__name__}", "options", rid
            )
        options = [_as_str(o, source, f"options[{i}]", rid) for i, o in enumerate(options)] or None
    videos = _as_paths(values.get("videos"), source, "videos", rid)
    images = _as_paths(values.get("images"), source, "images", rid)
    start = _as_number(values.get("video_start"), source, "video_start", rid)
    end = _as_number(values.get("video_end"), source, "video_end", rid)
    if start is not None and end is not None and end <= start:
        raise RecordError(source, f"video_end ({end}) must be after video_start ({start})", "video_end", rid)
    if (start is not None or end is not None) and not videos:
        raise RecordError(source, "a clip window needs a video", "video_start", rid)
    fps = _as_number(values.get("fps"), source, "fps", rid)
    if fps == 0:
        raise RecordError(source, "must be > 0", "fps", rid)
    data_type = _as_str(values.get("data_type", ""), source, "data_type", rid) or ""
    problem_type = _as_str(values.get("problem_type", ""), source, "problem_type", rid) or ""
    return Record(
        problem=problem,
        answer=_as_str(values.get("answer", ""), source, "answer", rid, allow_none=True) or "",
        videos=videos,
        images=images,
        data_type=data_type or ("video" if videos else "image" if images else "text"),
        problem_type=problem_type.strip(),
        options=options,
        offline_output=_as_str(values.get("offline_output"), source, "offline_output", rid, allow_none=True)
        or None,
        offline_turns=_offline_turns(values.get("offline_turns"), source, rid),
        problem_id=rid if rid is not None else source,
        video_start=start,
        video_end=end,
        fps=fps,
        max_frames=_as_number(values.get("max_frames"), source, "max_frames", rid, integer=True),
        extra=extra,
        source=source,
    )


def _offline_turns(value: Any, source: str, rid: str | None) -> list[str] | None:
    """``offline_turns``: a non-empty list of non-empty strings (the policy's turns), or absent."""
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise RecordError(source, "expected a non-empty list of the policy's turns", "offline_turns", rid)
    turns = [_as_str(t, source, f"offline_turns[{i}]", rid) for i, t in enumerate(value)]
    empty = [i for i, t in enumerate(turns) if not t.strip()]
    if empty:
        raise RecordError(source, "a turn is empty", f"offline_turns[{empty[0]}]", rid)
    return turns


def _reverse_key(raw: dict, name: str, preferred_key: str) -> str:
    for k in raw:
        if k != preferred_key and _ALIASES.get(k, k) == name:
            return k if k != name else f"{name}_text"
    return f"{name}_text"


PARQUET_MAGIC = b"PAR1"


def file_format(path: str) -> str:
    """``parquet``, ``json`` (an array) or ``jsonl``, from the content: a Parquet file is one
    whatever its name (a ``.jsonl`` name on a Parquet file used to fail as undecodable text)."""
    with open(path, "rb") as f:
        head = f.read(4096)
    if head.startswith(PARQUET_MAGIC) or path.endswith(".parquet"):
        return "parquet"
    return "json" if head.removeprefix(BOM).lstrip().startswith(b"[") else "jsonl"


def iter_raw(path: str) -> Iterator[tuple[str, Any]]:
    """Yield ``(source, raw_record)`` from a JSON array, JSONL or Parquet file; ``raw_record`` is an
    :class:`UnreadableRecord` for a JSONL line that cannot be read (the other lines still are)."""
    path = str(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: data file not found")
    if os.path.isdir(path):
        raise RecordError(path, "is a directory; expected a data file (JSON array, JSONL or Parquet)")
    kind = file_format(path)
    if kind == "parquet":
        yield from _parquet_rows(path)
    elif kind == "json":
        yield from ((f"{path}[{i}]", row) for i, row in enumerate(_json_array(path)))
    else:
        for lineno, value in json_lines(path):
            yield f"{path}:{lineno}", value


def _json_array(path: str) -> list:
    """A JSON array file's items; its text is read whole, so a bad byte or too deep nesting is one
    error naming the file and where."""
    with open(path, "rb") as f:
        data = f.read().removeprefix(BOM)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = len(data[data.rfind(b"\n", 0, e.start) + 1 : e.start].decode("utf-8", "replace")) + 1
        raise RecordError(
            path, f"not valid UTF-8 (byte 0x{data[e.start]:02x} at line {line} column {column})"
        ) from None
    try:
        return parse_json(text, path)
    except UnreadableRecord as e:  # the whole file is unusable: a plain RecordError stops the job
        raise RecordError(path, e.reason) from None


def _parquet_rows(path: str) -> Iterator[tuple[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        raise RecordError(path, f"cannot read as Parquet: {e}") from None
    try:
        rows: list[Any] = table.to_pylist()
    except UnicodeDecodeError:  # Parquet does not guarantee that string columns are UTF-8
        rows = [_parquet_row(table, i, path) for i in range(table.num_rows)]
    for i, row in enumerate(rows):
        yield f"{path}[{i}]", row


def _parquet_row(table, i: int, path: str) -> Any:
    try:
        return table.slice(i, 1).to_pylist()[0]
    except UnicodeDecodeError as e:
        return UnreadableRecord(
            f"{path}[{i}]", f"not valid UTF-8 (byte 0x{e.object[e.start]:02x} in a string)"
        )


def load_records(
    path: str, errors: list[RecordError] | None = None, collect: type[RecordError] = RecordError
) -> list[Record]:
    """All records of a data file. With ``errors`` given, bad records of the kind ``collect`` (every
    kind by default; :class:`UnreadableRecord` for jobs that stop on a schema error but skip damaged
    text) are collected there and skipped; any other bad record raises :class:`RecordError`."""
    records = []
    for source, raw in iter_raw(path):
        try:
            if isinstance(raw, RecordError):
                raise raw
            records.append(parse_record(raw, source))
        except RecordError as e:
            if errors is None or not isinstance(e, collect):
                raise
            errors.append(e)
    return records
