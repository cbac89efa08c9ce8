"""The filter's results, written from ``responses.jsonl`` alone (so a resumed run writes what an
uninterrupted one does): ``pass_rates.jsonl`` and the kept records in each input's own format.

``pass_rates.jsonl`` has one line per input record, in input order. ``status`` is ``scored``,
``failed`` (media or generation failed: ``error`` says why) or ``invalid`` (the record does not
validate or no reward task handles its ``problem_type``). Failed and invalid records have no pass
rate and are never kept.

Kept records go to ``OUT/kept/<input file name>``: JSONL lines copied byte for byte, a JSON array
of the original objects (2-space indent when the input was indented, else one line), Parquet rows
taken from the input table with its schema.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from ..evaluation.predictions import read_predictions
from ..evaluation.rows import reward_digest
from ..outdir import make_dir, replacing
from ..rewards import RewardConfig
from .filter import RESPONSES, FilterSettings, score_row
from .inputs import InputFile, InputRecord


@dataclass
class RecordResult:
    """One input record's outcome (a ``pass_rates.jsonl`` line)."""

    item: InputRecord
    status: str
    n: int = 0
    passes: int = 0
    rewards: list[float] | None = None
    accuracy: list[float] | None = None
    kept: bool = False
    error: str | None = None
    threshold: float | None = None

    @property
    def pass_rate(self) -> float | None:
        return self.passes / self.n if self.status == "scored" and self.n else None

    def row(self) -> dict[str, Any]:
        it = self.item
        return {
            "sample_id": it.sample_id,
            "problem_id": it.problem_id,
            "file": it.file,
            "position": it.position,
            "source": it.source,
            "task": it.task,
            "status": self.status,
            "n": self.n,
            "passes": self.passes,
            "pass_rate": self.pass_rate,
            "pass_threshold": self.threshold,
            "rewards": self.rewards,
            "accuracy": self.accuracy,
            "kept": self.kept,
            "error": self.error,
        }


def collect(
    files: list[InputFile], settings: FilterSettings, reward: RewardConfig, out_dir: str, digest: str
) -> list[RecordResult]:
    """Every input record's result from ``OUT/responses.jsonl`` (rows under ``digest``; rows scored
    under another reward config are scored again, the responses stay)."""
    rows = read_predictions(os.path.join(out_dir, RESPONSES), digest).rows
    current = reward_digest(reward)
    results = []
    for item in (it for f in files for it in f.items):
        if item.record is None:
            results.append(RecordResult(item, "invalid", error=item.error))
            continue
        row = rows.get(str(item.sample_id))
        if row is None or row.get("failed") or not isinstance(row.get("responses"), list):
            why = "not sampled (the run was interrupted)" if row is None else row.get("error")
            results.append(RecordResult(item, "failed", error=str(why)))
            continue
        # scored again under other scoring settings, or where the judge gave no verdict last time
        if row.get("scoring") != current or any(s.get("judge_error") for s in row["scores"]):
            row = score_row(row, item.record, reward)
        # a response the judge gave no verdict on is not in the pass rate (neither pass nor fail)
        judged = [s for s in row["scores"] if not s.get("judge_error")]
        if not judged:
            why = row["scores"][0]["judge_error"] if row["scores"] else "no responses"
            results.append(RecordResult(item, "failed", error=f"not scored: {why}"))
            continue
        accuracy = [float(s.get("accuracy", 0.0)) for s in judged]
        task = item.task
        passes = sum(settings.rule.passes(task, a) for a in accuracy)
        n = len(accuracy)
        results.append(
            RecordResult(
                item,
                "scored",
                n=n,
                passes=passes,
                rewards=[float(s.get("overall", 0.0)) for s in judged],
                accuracy=accuracy,
                kept=settings.band.keeps(passes, n),
                threshold=settings.rule.threshold(task),
            )
        )
    return results


def write_json_lines(path: str, rows: list[dict]) -> None:
    with replacing(path) as f:
        f.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def kept_paths(files: list[InputFile], out_dir: str) -> dict[str, str]:
    """Input file -> its kept file, ``OUT/kept/<name>`` (``<k>-<name>`` when two inputs share a name)."""
    out, taken = {}, set()
    for k, f in enumerate(files):
        name = os.path.basename(f.path)
        if name in taken:
            name = f"{k}-{name}"
        taken.add(name)
        out[f.path] = os.path.join(out_dir, "kept", name)
    return out


def write_kept(files: list[InputFile], results: list[RecordResult], out_dir: str) -> dict[str, dict]:
    """One kept file per input file, in the input's format; returns input -> {path (relative to
    ``out_dir``), kept, total, format}."""
    make_dir(os.path.join(out_dir, "kept"))
    kept = {(r.item.file, r.item.position) for r in results if r.kept}
    paths = kept_paths(files, out_dir)
    summary = {}
    for f in files:
        chosen = [it for it in f.items if (f.path, it.position) in kept]
        path = paths[f.path]
        if f.kind == "jsonl":  # each line as the input wrote it, its own line ending included
            with replacing(path, binary=True) as out:
                for it in chosen:
                    line = it.line or ""
                    out.write((line if line.endswith(("\n", "\r")) else line + "\n").encode("utf-8"))
        elif f.kind == "json":
            indent = 2 if _indented(f.path) else None
            with replacing(path) as out:
                json.dump([it.raw for it in chosen], out, ensure_ascii=False, indent=indent)
                out.write("\n")
        else:
            import pyarrow.parquet as pq

            table = pq.read_table(f.path)
            with replacing(path, binary=True) as out:
                pq.write_table(table.take([it.position for it in chosen]), out)
        # relative to OUT: the report must not depend on where OUT is (a moved or resumed run's is the same)
        rel = os.path.relpath(path, out_dir)
        summary[f.path] = {"path": rel, "kept": len(chosen), "total": len(f.items), "format": f.kind}
    return summary


def _indented(path: str) -> bool:
    with open(path, encoding="utf-8-sig") as f:
        head = f.read(4096).lstrip()
    return head.startswith("[") and "\n" in head[:200]
