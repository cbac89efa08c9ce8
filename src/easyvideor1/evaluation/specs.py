"""Built-in benchmarks: the unified annotation files (see ../shared/benchmarks) with their official
breakdowns. Adding one is one ``register_benchmark(BenchmarkSpec(...))`` call."""

from __future__ import annotations

import dataclasses

from ..data.records import Record
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


def _field(name: str):
    return lambda rec: str(rec.extra.get(name) or "unknown")


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


_SPECS = [
    BenchmarkSpec(
        "videomme",
        "videomme.json",
        "Video-MME",
        micro_with_breakdown(_field("duration"), "by_duration"),
        breakdown_note="accuracy by duration (short / medium / long)",
    ),
    BenchmarkSpec(
        "mvbench",
        "mvbench.json",
        "MVBench",
        macro_over(_mvbench_task, "by_task"),
        adapt=_mvbench_clip,
        breakdown_note="mean over sub-tasks; start/end clip windows honoured",
    ),
    BenchmarkSpec("lvbench", "lvbench.json", "LVBench"),
    BenchmarkSpec(
        "longvideobench",
        "longvideobench.json",
        "LongVideoBench",
        micro_with_breakdown(_field("original_question_type"), "by_question_type"),
    ),
    BenchmarkSpec("mlvu-dev", "mlvu-dev.json", "MLVU_dev/MLVU_dev"),
    BenchmarkSpec("mlvu-test", "mlvu-test.json", "MLVU_Test"),
    BenchmarkSpec(
        "videommmu",
        "videommmu_with_image.json",
        "VideoMMMU",
        micro_with_breakdown(_field("original_question_type"), "by_question_type"),
    ),
    BenchmarkSpec(
        "vsibench",
        "vsibench.json",
        "VSI-Bench",
        macro_over(_field("original_question_type"), "by_task"),
        breakdown_note="macro average over task types; MRA for numeric answers",
    ),
    BenchmarkSpec("mmvu", "mmvu-all.json", "MMVU", micro_with_breakdown(lambda r: r.problem_type, "by_type")),
    BenchmarkSpec("mmvu-mc", "mmvu-mc.json", "MMVU"),
    BenchmarkSpec("holmes", "holmes.json", "Video-Holmes"),
    BenchmarkSpec(
        "videomathqa",
        "videomathqa.jsonl",
        "VideoMathQA",
        multi_binary,
        breakdown_note="multi-binary questions count only if all their pairs are right",
    ),
    BenchmarkSpec("longvideoreason", "longvideoreason.json", "longvila_videos"),
    BenchmarkSpec(
        "motionbench",
        "motionbench.json",
        "MotionBench",
        micro_with_breakdown(_field("original_question_type"), "by_category"),
    ),
    BenchmarkSpec(
        "charades_sta",
        "charades_sta.json",
        "Charades_sta/Charades_v1_480",
        temporal_recall(),
        breakdown_note="mIoU and R@{0.3, 0.5, 0.7}",
    ),
    BenchmarkSpec("stvg", "stvg.json", "ST-Align-Benchmark", spatio_temporal),
    BenchmarkSpec("videommlu", "videommlu.json", "Video-MMLU"),
    # Not shipped in ../shared; their documented unified formats (reference section 7.1):
    BenchmarkSpec(
        "ovobench",
        "ovobench.json",
        "OVO-Bench/chunked_videos",
        nested_macro(_field("ovo_task"), _field("ovo_category"), ("by_task", "by_category")),
        breakdown_note="accuracy per task -> macro per category (backward/realtime/forward) -> macro",
    ),
    BenchmarkSpec(
        "odvbench",
        "odvbench.json",
        "ODV-Bench/clips",
        several_breakdowns(by_task=_field("odv_task"), by_subtask=_field("odv_subtask")),
    ),
    BenchmarkSpec(
        "livesports3k_qa",
        "livesports3k_qa.json",
        "LiveSports-3K-QA/clips",
        several_breakdowns(by_question_type=_field("q_type_livesports"), by_ocr=_field("ocr_livesports")),
    ),
    BenchmarkSpec("minerva", "minerva.json", "Minderva"),
    BenchmarkSpec(
        "vcrbench",
        "vcrbench.json",
        "VCR-Bench/v1/videos",
        micro_with_breakdown(lambda r: r.problem_type, "by_type"),
    ),
    BenchmarkSpec("videoreasonbench", "videoreasonbench.json", "VideoReasonBench/videos"),
    BenchmarkSpec(
        "tempcompass",
        "tempcompass.json",
        "TempCompass",
        micro_with_breakdown(_field("original_question_type"), "by_dimension"),
    ),
    # `easyvideor1 synth --out DIR` output: DIR is both the annotation directory and the video root
    BenchmarkSpec(
        "synthetic", "records.jsonl", "", micro_with_breakdown(lambda r: r.problem_type, "by_task")
    ),
]

for _spec in _SPECS:
    register_benchmark(_spec)
