"""One benchmark's samples as the model will see them: records, unique sample ids, exact prompts.

Torch-free: ``eval --dry-run`` and ``score`` build these and load no model.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..data.prompt import build_content
from ..data.records import Record
from .config import EvalConfig
from .identity import sample_ids
from .registry import BenchmarkSpec


@dataclasses.dataclass
class BenchmarkInputs:
    """One benchmark's samples as the model will see them: unique ids, exact prompts, media."""

    spec: BenchmarkSpec
    records: list[Record]
    ids: list[str]
    prompts: list[str]
    annotation_file: str
    unreadable_records: int = 0  # records of the file left out as their text cannot be read

    @classmethod
    def build(
        cls,
        spec: BenchmarkSpec,
        records: list[Record],
        annotation_file: str,
        settings: EvalConfig,
        unreadable_records: int = 0,
    ) -> BenchmarkInputs:
        records = records[: settings.max_samples] if settings.max_samples else records
        prompts = [spec.build_prompt(r, settings.style) for r in records]
        ids = sample_ids(records, spec.name)
        return cls(spec, records, ids, prompts, annotation_file, unreadable_records)

    def prompted(self) -> list[Record]:
        return [dataclasses.replace(r, problem=p) for r, p in zip(self.records, self.prompts, strict=True)]

    def prompt_rows(self) -> list[dict[str, Any]]:
        """``prompts.jsonl`` rows: the user text exactly as the model receives it, media as placeholders."""
        rows = []
        for sid, rec, prompted in zip(self.ids, self.records, self.prompted(), strict=True):
            content = build_content(prompted)
            text = "".join(c["text"] if c["type"] == "text" else f"<{c['type']}>" for c in content)
            media: dict[str, Any] = {"videos": rec.videos, "images": rec.images}
            if rec.video_start is not None or rec.video_end is not None:
                media["clip"] = [rec.video_start, rec.video_end]
            rows.append(
                {
                    "sample_id": sid,
                    "prompt": text,
                    "media": media,
                    "answer": rec.answer,
                    "problem_type": rec.problem_type,
                    "options": rec.options,
                }
            )
        return rows
