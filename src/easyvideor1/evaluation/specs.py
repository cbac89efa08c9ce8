"""Built-in benchmarks: the unified annotation files (see ../shared/benchmarks) with their official
metrics, breakdowns, prompt sources and generation lengths. Adding one is one
``register_benchmark(BenchmarkSpec(...))`` call; a benchmark whose official evaluation builds its
own prompt or scores differently has a module under ``benchmarks/``.

Generation lengths: greedy decoding stops at the end of the answer, so a generous limit costs
nothing on short answers and keeps the ``thinking`` style from being cut. The EasyVideoR1
thinking-mode scripts use 4096 for every benchmark; VideoReasonBench's official config uses 4096.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..data.records import Record
from .benchmarks import minerva, ovobench, vcrbench, videoreasonbench
from .metrics import (
    macro_over,
    micro_with_breakdown,
    multi_binary,
    nested_macro,
    several_breakdowns,
    spatio_temporal,
    temporal_recall,
)
from .registry import BenchmarkSpec, register_benchmark


def label(value) -> str:
    """A breakdown label: missing/None/empty text is "unknown"; 0 is "0", False is "false"."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return "unknown"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip()


def _field(name: str):
    return lambda rec: label(rec.extra.get(name))


def _by_fields(**fields: str) -> dict[str, Any]:
    """A spec's micro accuracy broken down by record fields (``by_duration="duration"``), and the
    fields the report filters by."""
    breakdowns = several_breakdowns(**{name: _field(f) for name, f in fields.items()})
    return {"aggregator": breakdowns, "breakdown_fields": tuple(fields.values())}


def _spec(name: str, video_dir: str, max_new_tokens: int, annotation: str = "", **spec: Any) -> BenchmarkSpec:
    """A built-in benchmark; its annotation file is ``<name>.json`` unless ``annotation`` says."""
    return BenchmarkSpec(name, annotation or f"{name}.json", video_dir, max_new_tokens=max_new_tokens, **spec)


def _first_dir(rec: Record) -> str:
    parts = [p for p in (rec.videos[0] if rec.videos else "").split("/") if p not in (".", "")]
    return parts[0] if len(parts) > 1 else "unknown"


def _mvbench_task(rec: Record) -> str:
    # "./sta/sta_video/X.mp4" -> "sta": MVBench's sub-task is the first directory
    parts = [p for p in rec.videos[0].split("/") if p not in (".", "")]
    return parts[0] if len(parts) > 1 else "unknown"


def _mvbench_clip(rec: Record) -> Record:
    """MVBench's STAR-derived questions are about a clip of the video: honour its start/end."""
    start, end = rec.extra.get("start"), rec.extra.get("end")
    if isinstance(start, (int, float)) and isinstance(end, (int, float)) and end > start >= 0:
        return dataclasses.replace(rec, video_start=float(start), video_end=float(end))
    return rec


_LONG, _SHORT = 4096, 1024  # reasoning benchmarks / answers that are a letter, number or JSON span

_SPECS = [
    _spec(
        "videomme",
        "Video-MME",
        _SHORT,
        breakdown_note="accuracy by duration (short / medium / long)",
        **_by_fields(by_duration="duration"),
    ),
    _spec(
        "mvbench",
        "MVBench",
        _SHORT,
        aggregator=macro_over(_mvbench_task, "by_task"),
        adapt=_mvbench_clip,
        breakdown_note="mean over sub-tasks; start/end clip windows honoured",
        metric="mean accuracy over tasks",
    ),
    _spec("lvbench", "LVBench", _SHORT),
    _spec(
        "longvideobench", "LongVideoBench", _SHORT, **_by_fields(by_question_type="original_question_type")
    ),
    _spec("mlvu-dev", "MLVU_dev/MLVU_dev", _SHORT),
    _spec("mlvu-test", "MLVU_Test", _SHORT),
    _spec(
        "videommmu",
        "VideoMMMU",
        _LONG,
        annotation="videommmu_with_image.json",
        breakdown_note="numerical answers rule-based (number match), as VideoMMMU's own parser",
        **_by_fields(by_question_type="original_question_type"),
    ),
    _spec(
        "vsibench",
        "VSI-Bench",
        _SHORT,
        aggregator=macro_over(_field("original_question_type"), "by_task"),
        breakdown_note="macro average over task types; MRA for numeric answers",
        metric="mean over task types (accuracy; MRA for numeric)",
        breakdown_fields=("original_question_type",),
    ),
    _spec(
        "mmvu",
        "MMVU",
        _LONG,
        annotation="mmvu-all.json",
        aggregator=micro_with_breakdown(lambda r: r.problem_type, "by_type"),
        breakdown_note="open-ended answers are judged (GPT-4o in MMVU's evaluation)",
        metric="accuracy (open-ended: judge accuracy)",
        needs_judge=True,
    ),
    _spec("mmvu-mc", "MMVU", _LONG),
    _spec("holmes", "Video-Holmes", _LONG),
    _spec(
        "videomathqa",
        "VideoMathQA",
        _LONG,
        annotation="videomathqa.jsonl",
        aggregator=multi_binary,
        breakdown_note="multi-binary questions count only if all their pairs are right",
        metric="multi-binary accuracy",
    ),
    _spec("longvideoreason", "longvila_videos", _LONG),
    _spec("motionbench", "MotionBench", _SHORT, **_by_fields(by_category="original_question_type")),
    _spec(
        "charades_sta",
        "Charades_sta/Charades_v1_480",
        _SHORT,
        aggregator=temporal_recall(),
        breakdown_note="mIoU and R@{0.3, 0.5, 0.7}",
        metric="mIoU",
    ),
    _spec("stvg", "ST-Align-Benchmark", _SHORT, aggregator=spatio_temporal, metric="0.5 tIoU + 0.5 box IoU"),
    _spec(
        "videommlu",
        "Video-MMLU",
        _LONG,
        breakdown_note="detailed captions, scored by an LLM judge in Video-MMLU's evaluation",
        metric="judge accuracy",
        needs_judge=True,
    ),
    # Not shipped in ../shared; their documented unified formats (reference section 7.1):
    _spec(
        "ovobench",
        "OVO-Bench/chunked_videos",
        _SHORT,
        aggregator=nested_macro(_field("ovo_task"), _field("ovo_category"), ("by_task", "by_category")),
        breakdown_note="accuracy per task -> macro per category (backward/realtime/forward) -> macro",
        prompt=ovobench.build_prompt,
        prompt_source=ovobench.SOURCE,
        metric="mean of category means of task accuracy",
        breakdown_fields=("ovo_task", "ovo_category"),
    ),
    _spec("odvbench", "ODV-Bench/clips", _SHORT, **_by_fields(by_task="odv_task", by_subtask="odv_subtask")),
    _spec(
        "livesports3k_qa",
        "LiveSports-3K-QA/clips",
        _SHORT,
        **_by_fields(by_question_type="q_type_livesports", by_ocr="ocr_livesports"),
    ),
    _spec(
        "minerva",
        "Minderva",
        _LONG,
        prompt=minerva.build_prompt,
        prompt_source=minerva.SOURCE,
        metric="MCQ accuracy (5 choices)",
    ),
    _spec(
        "vcrbench",
        "VCR-Bench/v1/videos",
        _LONG,
        aggregator=micro_with_breakdown(lambda r: r.problem_type, "by_type"),
        breakdown_note="MC by letter; span/box answers by IoU > 0.7 / 0.5; other open-ended judged",
        scorer=vcrbench.score,
        prompt_source=vcrbench.SOURCE,
        metric="accuracy (open-ended: judge / IoU)",
        needs_judge=True,
    ),
    _spec(
        "videoreasonbench",
        "VideoReasonBench/videos",
        _LONG,
        aggregator=micro_with_breakdown(_first_dir, "by_demo"),
        breakdown_note="judge accuracy on the text after 'Final Answer', by demo (card, chip, cup, ...)",
        prompt=videoreasonbench.build_prompt,
        scorer=videoreasonbench.score,
        prompt_source=videoreasonbench.SOURCE,
        metric="judge accuracy",
        needs_judge=True,
    ),
    _spec("tempcompass", "TempCompass", _SHORT, **_by_fields(by_dimension="original_question_type")),
    # `easyvideor1 synth --out DIR` output: DIR is both the annotation directory and the video root
    _spec(
        "synthetic",
        "",
        _SHORT,
        annotation="records.jsonl",
        aggregator=micro_with_breakdown(lambda r: r.problem_type, "by_task"),
    ),
]

for _spec in _SPECS:
    register_benchmark(_spec)
