"""What identifies a sample and a model, so that resumed runs reuse exactly the right predictions.

Sample ids: benchmark files are not unique by ``problem_id`` (LiveSports-3K has 4 ids shared by
9 different questions), so a sample's id is its ``problem_id`` plus a digest of the record's
content; records identical in every field get an occurrence suffix. The id is stable across
runs and file re-orderings, and is what ``prompts.jsonl`` and ``score --predictions`` use.

Model fingerprint: the model *path* is not enough (weights replaced in place would reuse every old
prediction). Small files are hashed whole; weight files are hashed by size plus their first and
last MiB and 32 blocks spread over the file: a few MiB read per file, and any training step
changes every tensor, so every sampled block.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import Counter

from ..data.records import Record

log = logging.getLogger(__name__)

_WHOLE_FILE_LIMIT = 32 << 20
_BLOCK = 64 << 10
_BLOCKS = 32
_EDGE = 1 << 20


def record_digest(record: Record) -> str:
    content = record.to_dict()
    content.pop("offline_output", None)
    blob = json.dumps(content, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:10]


def sample_ids(records: list[Record], benchmark: str = "") -> list[str]:
    """One unique, stable id per record: ``<problem_id>~<content digest>`` (+ ``~k`` for exact copies).

    Duplicated ``problem_id``s with different content are warned about and kept apart."""
    ids, seen = [], Counter()
    for rec in records:
        base = f"{rec.problem_id}~{record_digest(rec)}"
        seen[base] += 1
        ids.append(base if seen[base] == 1 else f"{base}~{seen[base]}")
    dup = Counter(r.problem_id for r in records)
    shared = {pid: n for pid, n in dup.items() if n > 1}
    if shared:
        example = ", ".join(f"{pid!r} x{n}" for pid, n in list(shared.items())[:4])
        log.warning(
            "%s: %d problem_id(s) are shared by several records (%s); each record is evaluated and "
            "scored on its own",
            benchmark or "records",
            len(shared),
            example,
        )
    return ids


def duplicate_problem_ids(records: list[Record]) -> int:
    return sum(1 for n in Counter(r.problem_id for r in records).values() if n > 1)


def _file_digest(path: str, h) -> None:
    size = os.path.getsize(path)
    h.update(f"{size}\0".encode())
    with open(path, "rb") as f:
        if size <= _WHOLE_FILE_LIMIT:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
            return
        h.update(f.read(_EDGE))
        for k in range(_BLOCKS):
            f.seek(_EDGE + (size - 2 * _EDGE - _BLOCK) * k // (_BLOCKS - 1))
            h.update(f.read(_BLOCK))
        f.seek(size - _EDGE)
        h.update(f.read(_EDGE))


def model_fingerprint(model: str) -> str:
    """A digest of a model directory's files (weights, config, tokenizer, processor, chat template).

    A name that is not a local directory (a hub id) is fingerprinted by the name alone."""
    h = hashlib.sha256()
    if not os.path.isdir(model):
        h.update(f"name:{model}".encode())
        return h.hexdigest()[:16]
    for root, dirs, files in os.walk(model):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(files):
            if name.startswith("."):
                continue
            path = os.path.join(root, name)
            h.update(os.path.relpath(path, model).encode() + b"\0")
            _file_digest(path, h)
    return h.hexdigest()[:16]
