"""The filter's input files, record by record, with what is needed to write kept records back.

Each input record keeps its original form: the parsed dict and, for JSONL, the exact text of its
line, so a kept record is written byte for byte as it was read (not our normalised ``Record``).
A record that does not validate, or whose ``problem_type`` no reward task handles, is kept in
the list with its reason: it is reported and counted ("failed to load"), never sampled.
Ids are evaluation's sample ids (``<problem_id>~<content digest>``, ``identity.py``), computed
over all input files together so that every record of the job has its own.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..data.records import Record, RecordError, file_format, iter_raw, parse_record
from ..evaluation.identity import sample_ids
from ..jsonlines import printable, split_lines
from ..rewards import RewardConfig, UnknownTaskError, resolve_task
from ..rewards.registry import load_task_files

FORMATS = ("jsonl", "json", "parquet")


@dataclass
class InputRecord:
    """One record of an input file.

    Attributes:
        file: The input file, as given.
        position: Index among the file's records (0-based, blank JSONL lines not counted).
        source: ``file:line`` (JSONL) or ``file[i]`` (JSON array, Parquet), as errors name it.
        raw: The record as read (a dict for a valid record; anything for an invalid one).
        line: JSONL only: the exact text of the record's line, line ending included.
        record: The validated record; None when it could not be used.
        task: Canonical reward task (``custom`` under a custom reward function), else the
            record's ``problem_type`` or ``unknown``.
        error: Why the record cannot be used (None for a usable one).
        sample_id: Evaluation's sample id (usable records only).
    """

    file: str
    position: int
    source: str
    raw: Any
    line: str | None = None
    record: Record | None = None
    task: str = "unknown"
    error: str | None = None
    sample_id: str | None = None

    @property
    def problem_id(self) -> str | None:
        if self.record is not None:
            return self.record.problem_id
        if isinstance(self.raw, RecordError):  # a line that could not be read: its error saw the id
            return self.raw.record_id
        if isinstance(self.raw, dict) and self.raw.get("problem_id", self.raw.get("id")) is not None:
            return printable(str(self.raw.get("problem_id", self.raw.get("id"))))  # reports must encode it
        return None


@dataclass
class InputFile:
    """An input file: its format (``jsonl``, ``json`` or ``parquet``) and its records in order."""

    path: str
    kind: str
    items: list[InputRecord] = field(default_factory=list)


def file_kind(path: str) -> str:
    """The format the data loader reads ``path`` in (``iter_raw``'s rule, from the content): kept
    records are written back in it."""
    return file_format(path)


def _jsonl_lines(path: str) -> dict[int, str]:
    """Line number -> exact text, split where ``iter_raw`` splits (``jsonlines.split_lines``) with each
    ending as written. Only readable lines are ever written back; an undecodable one is kept here
    with replacement characters, for its number only."""
    return {n: data.decode("utf-8", "replace") for n, data in split_lines(path)}


def _task_of(record: Record, reward: RewardConfig) -> str:
    if reward.reward_function:
        return "custom"
    try:
        return resolve_task(record.problem_type).name
    except UnknownTaskError as e:
        raise RecordError(record.source, str(e), "problem_type", record.problem_id) from None


def load_inputs(paths: list[str], reward: RewardConfig) -> list[InputFile]:
    """Every input file's records; missing files and unreadable files raise before any work."""
    load_task_files(reward.task_files)  # user tasks decide problem types too
    for path in paths:
        if not os.path.isfile(path):
            raise FileNotFoundError(f"--data: data file not found: {path}")
    files = []
    for path in paths:
        kind = file_kind(path)
        lines = _jsonl_lines(path) if kind == "jsonl" else {}
        out = InputFile(path, kind)
        for position, (source, raw) in enumerate(iter_raw(path)):
            item = InputRecord(path, position, source, raw)
            if kind == "jsonl":
                item.line = lines[int(source.rsplit(":", 1)[1])]
            try:
                if isinstance(raw, RecordError):
                    raise raw
                item.record = parse_record(raw, source)
                item.task = _task_of(item.record, reward)
            except RecordError as e:
                item.record, item.error = None, str(e)
                if isinstance(raw, dict) and isinstance(raw.get("problem_type"), str):
                    item.task = _canonical_or_raw(raw["problem_type"])
            out.items.append(item)
        files.append(out)
    usable = [item for f in files for item in f.items if item.record is not None]
    for item, sid in zip(usable, sample_ids([i.record for i in usable], "filter inputs"), strict=True):
        item.sample_id = sid
    return files


def _canonical_or_raw(problem_type: str) -> str:
    try:
        return resolve_task(problem_type).name
    except UnknownTaskError:
        return problem_type.strip() or "unknown"
