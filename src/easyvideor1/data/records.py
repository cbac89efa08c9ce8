"""The record schema: one training or evaluation example, read from JSON, JSONL or Parquet.

A record is the reference's schema (problem, answer, videos, images, data_type, problem_type,
options, offline_output, problem_id, free extra fields) plus clip windows (``video_start``,
``video_end``) and per-record ``fps`` / ``max_frames`` overrides. Benchmark annotation files use
other names (``solution``, ``path``, ``image_path``); they are mapped here so every consumer sees
one schema. Records are validated one by one, so a field may have different types across records
(the reference's arrow loading rejected that), and each error names file, position and field.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


class RecordError(ValueError):
    """A record that cannot be used; ``str()`` names the file, the position and the field."""

    def __init__(self, source: str, reason: str, field_name: str | None = None, record_id: str | None = None):
        self.source, self.reason, self.field, self.record_id = source, reason, field_name, record_id
        where = f"{source}" + (f" (problem_id={record_id})" if record_id else "")
        super().__init__(f"{where}: " + (f"field '{field_name}': " if field_name else "") + reason)


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
    "problem answer videos images data_type problem_type options offline_output problem_id "
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
        problem_id=rid if rid is not None else source,
        video_start=start,
        video_end=end,
        fps=fps,
        max_frames=_as_number(values.get("max_frames"), source, "max_frames", rid, integer=True),
        extra=extra,
        source=source,
    )


def _reverse_key(raw: dict, name: str, preferred_key: str) -> str:
    for k in raw:
        if k != preferred_key and _ALIASES.get(k, k) == name:
            return k if k != name else f"{name}_text"
    return f"{name}_text"


def iter_raw(path: str) -> Iterator[tuple[str, Any]]:
    """Yield ``(source, raw_record)`` from a JSON array, JSONL or Parquet file."""
    path = str(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: data file not found")
    if os.path.isdir(path):
        raise RecordError(path, "is a directory; expected a data file (JSON array, JSONL or Parquet)")
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        for i, row in enumerate(pq.read_table(path).to_pylist()):
            yield f"{path}[{i}]", row
        return
    # utf-8-sig: files saved by Windows tools start with a byte-order mark, which is not JSON
    with open(path, encoding="utf-8-sig") as f:
        head = f.read(4096).lstrip()
        f.seek(0)
        if head.startswith("["):
            try:
                data = json.load(f)
            except json.JSONDecodeError as e:
                raise RecordError(path, f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from e
            for i, row in enumerate(data):
                yield f"{path}[{i}]", row
            return
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                yield (
                    f"{path}:{lineno}",
                    RecordError(f"{path}:{lineno}", f"invalid JSON ({e.msg} at column {e.colno})"),
                )
                continue
            yield f"{path}:{lineno}", row


def load_records(path: str, errors: list[RecordError] | None = None) -> list[Record]:
    """All records of a data file. With ``errors`` given, bad records are collected there and skipped;
    without it the first bad record raises :class:`RecordError`."""
    records = []
    for source, raw in iter_raw(path):
        try:
            if isinstance(raw, RecordError):
                raise raw
            records.append(parse_record(raw, source))
        except RecordError as e:
            if errors is None:
                raise
            errors.append(e)
    return records
