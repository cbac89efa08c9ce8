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
    BenchmarkSpec(
        "videomme",
        "videomme.json",
        "Video-MME",
        breakdown_note="accuracy by duration (short / medium / long)",
        max_new_tokens=_SHORT,
        **_by_fields(by_duration="duration"),
    ),
    BenchmarkSpec(
        "mvbench",
        "mvbench.json",
        "MVBench",
        macro_over(_mvbench_task, "by_task"),
        adapt=_mvbench_clip,
        breakdown_note="mean over sub-tasks; start/end clip windows honoured",
        max_new_tokens=_SHORT,
        metric="mean accuracy over tasks",
    ),
    BenchmarkSpec("lvbench", "lvbench.json", "LVBench", max_new_tokens=_SHORT),
    BenchmarkSpec(
        "longvideobench",
        "longvideobench.json",
        "LongVideoBench",
        max_new_tokens=_SHORT,
        **_by_fields(by_question_type="original_question_type"),
    ),
    BenchmarkSpec("mlvu-dev", "mlvu-dev.json", "MLVU_dev/MLVU_dev", max_new_tokens=_SHORT),
    BenchmarkSpec("mlvu-test", "mlvu-test.json", "MLVU_Test", max_new_tokens=_SHORT),
    BenchmarkSpec(
        "videommmu",
        "videommmu_with_image.json",
        "VideoMMMU",
        breakdown_note="numerical answers rule-based (number match), as VideoMMMU's own parser",
        max_new_tokens=_LONG,
        **_by_fields(by_question_type="original_question_type"),
    ),
    BenchmarkSpec(
        "vsibench",
        "vsibench.json",
        "VSI-Bench",
        macro_over(_field("original_question_type"), "by_task"),
        breakdown_note="macro average over task types; MRA for numeric answers",
        max_new_tokens=_SHORT,
        metric="mean over task types (accuracy; MRA for numeric)",
        breakdown_fields=("original_question_type",),
    ),
    BenchmarkSpec(
        "mmvu",
        "mmvu-all.json",
        "MMVU",
        micro_with_breakdown(lambda r: r.problem_type, "by_type"),
        breakdown_note="open-ended answers are judged (GPT-4o in MMVU's evaluation)",
        max_new_tokens=_LONG,
        metric="accuracy (open-ended: judge accuracy)",
        needs_judge=True,
    ),
    BenchmarkSpec("mmvu-mc", "mmvu-mc.json", "MMVU", max_new_tokens=_LONG),
    BenchmarkSpec("holmes", "holmes.json", "Video-Holmes", max_new_tokens=_LONG),
    BenchmarkSpec(
        "videomathqa",
        "videomathqa.jsonl",
        "VideoMathQA",
        multi_binary,
        breakdown_note="multi-binary questions count only if all their pairs are right",
        max_new_tokens=_LONG,
        metric="multi-binary accuracy",
    ),
    BenchmarkSpec("longvideoreason", "longvideoreason.json", "longvila_videos", max_new_tokens=_LONG),
    BenchmarkSpec(
        "motionbench",
        "motionbench.json",
        "MotionBench",
        max_new_tokens=_SHORT,
        **_by_fields(by_category="original_question_type"),
    ),
    BenchmarkSpec(
        "charades_sta",
        "charades_sta.json",
        "Charades_sta/Charades_v1_480",
        temporal_recall(),
        breakdown_note="mIoU and R@{0.3, 0.5, 0.7}",
        max_new_tokens=_SHORT,
        metric="mIoU",
    ),
    BenchmarkSpec(
        "stvg",
        "stvg.json",
        "ST-Align-Benchmark",
        spatio_temporal,
        max_new_tokens=_SHORT,
        metric="0.5 tIoU + 0.5 box IoU",
    ),
    BenchmarkSpec(
        "videommlu",
        "videommlu.json",
        "Video-MMLU",
        breakdown_note="detailed captions, scored by an LLM judge in Video-MMLU's evaluation",
        max_new_tokens=_LONG,
        metric="judge accuracy",
        needs_judge=True,
    ),
    # Not shipped in ../shared; their documented unified formats (reference section 7.1):
    BenchmarkSpec(
        "ovobench",
        "ovobench.json",
        "OVO-Bench/chunked_videos",
        nested_macro(_field("ovo_task"), _field("ovo_category"), ("by_task", "by_category")),
        breakdown_note="accuracy per task -> macro per category (backward/realtime/forward) -> macro",
        prompt=ovobench.build_prompt,
        prompt_source=ovobench.SOURCE,
        max_new_tokens=_SHORT,
        metric="mean of category means of task accuracy",
        breakdown_fields=("ovo_task", "ovo_category"),
    ),
    BenchmarkSpec(
        "odvbench",
        "odvbench.json",
        "ODV-Bench/clips",
        max_new_tokens=_SHORT,
        **_by_fields(by_task="odv_task", by_subtask="odv_subtask"),
    ),
    BenchmarkSpec(
        "livesports3k_qa",
        "livesports3k_qa.json",
        "LiveSports-3K-QA/clips",
        max_new_tokens=_SHORT,
        **_by_fields(by_question_type="q_type_livesports", by_ocr="ocr_livesports"),
    ),
    BenchmarkSpec(
        "minerva",
        "minerva.json",
        "Minderva",
        prompt=minerva.build_prompt,
        prompt_source=minerva.SOURCE,
        max_new_tokens=_LONG,
        metric="MCQ accuracy (5 choices)",
    ),
    BenchmarkSpec(
        "vcrbench",
        "vcrbench.json",
        "VCR-Bench/v1/videos",
        micro_with_breakdown(lambda r: r.problem_type, "by_type"),
        breakdown_note="MC by letter; span/box answers by IoU > 0.7 / 0.5; other open-ended judged",
        scorer=vcrbench.score,
        prompt_source=vcrbench.SOURCE,
        max_new_tokens=_LONG,
        metric="accuracy (open-ended: judge / IoU)",
        needs_judge=True,
    ),
    BenchmarkSpec(
        "videoreasonbench",
        "videoreasonbench.json",
        "VideoReasonBench/videos",
        micro_with_breakdown(_first_dir, "by_demo"),
        breakdown_note="judge accuracy on the text after 'Final Answer', by demo (card, chip, cup, ...)",
        prompt=videoreasonbench.build_prompt,
        scorer=videoreasonbench.score,
        prompt_source=videoreasonbench.SOURCE,
        max_new_tokens=_LONG,
        metric="judge accuracy",
        needs_judge=True,
    ),
    BenchmarkSpec(
        "tempcompass",
        "tempcompass.json",
        "TempCompass",
        max_new_tokens=_SHORT,
        **_by_fields(by_dimension="original_question_type"),
    ),
    # `easyvideor1 synth --out DIR` output: DIR is both the annotation directory and the video root
    BenchmarkSpec(
        "synthetic",
        "records.jsonl",
        "",
        micro_with_breakdown(lambda r: r.problem_type, "by_task"),
        max_new_tokens=_SHORT,
    ),
]

for _spec in _SPECS:
    register_benchmark(_spec)
