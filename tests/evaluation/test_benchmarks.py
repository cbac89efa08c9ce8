"""Benchmark metrics match hand-computed values; breakdown labels, judge-less exclusion and proxies.

(Gold = 1.0 / wrong = 0.0 on every benchmark's file: test_benchmark_gold.py; official prompts:
test_official_prompts.py.)"""

from __future__ import annotations

import pytest

from easyvideor1.data.records import parse_record
from easyvideor1.evaluation import get_benchmark, list_benchmarks, render_prompt
from easyvideor1.evaluation.registry import UnknownBenchmarkError
from easyvideor1.evaluation.specs import label
from easyvideor1.rewards import answer_instruction


def _rec(i, **fields):
    return parse_record(
        {"problem_id": str(i), "problem": "q", "videos": ["./task/v.mp4"], **fields}, f"f[{i}]"
    )


def test_videomme_by_duration():
    rows = [
        (_rec(0, duration="short"), {"accuracy": 1.0}),
        (_rec(1, duration="short"), {"accuracy": 0.0}),
        (_rec(2, duration="long"), {"accuracy": 1.0}),
    ]
    out = get_benchmark("videomme").aggregate(rows)
    assert out["score"] == pytest.approx(2 / 3) and out["by_duration"] == {"long": 1.0, "short": 0.5}


def test_vsibench_macro_over_task_types():
    rows = [
        (_rec(0, original_question_type="count"), {"accuracy": 1.0}),
        (_rec(1, original_question_type="count"), {"accuracy": 1.0}),
        (_rec(2, original_question_type="count"), {"accuracy": 1.0}),
        (_rec(3, original_question_type="size"), {"accuracy": 0.2}),
    ]
    out = get_benchmark("vsibench").aggregate(rows)
    assert out["score"] == pytest.approx((1.0 + 0.2) / 2) and out["micro"] == pytest.approx(3.2 / 4)


def test_videomathqa_multi_binary_is_all_or_nothing():
    rows = [
        (_rec("a", problem_id="q1", mbinary_id=1), {"accuracy": 1.0}),
        (_rec("b", problem_id="q1", mbinary_id=2), {"accuracy": 1.0}),
        (_rec("c", problem_id="q2", mbinary_id=3), {"accuracy": 1.0}),
        (_rec("d", problem_id="q2", mbinary_id=4), {"accuracy": 0.0}),
        (_rec("e", problem_id="q3"), {"accuracy": 1.0}),
        (_rec("f", problem_id="q4"), {"accuracy": 0.0}),
    ]
    out = get_benchmark("videomathqa").aggregate(rows)
    assert (out["mbin"], out["mcq"], out["mbin_questions"]) == (0.5, 0.5, 2)


def test_charades_miou_and_recall():
    tious = [0.1, 0.35, 0.55, 0.9]
    rows = [(_rec(i), {"accuracy": t, "tiou": t}) for i, t in enumerate(tious)]
    out = get_benchmark("charades_sta").aggregate(rows)
    assert out["miou"] == pytest.approx(sum(tious) / 4)
    assert (out["R@0.3"], out["R@0.5"], out["R@0.7"]) == (0.75, 0.5, 0.25)


def test_mvbench_tasks_and_clip_windows():
    rows = [
        (_rec(0, videos=["./sta/sta_video/a.mp4"]), {"accuracy": 1.0}),
        (_rec(1, videos=["./sta/sta_video/b.mp4"]), {"accuracy": 0.0}),
        (_rec(2, videos=["./clevrer/video/c.mp4"]), {"accuracy": 1.0}),
    ]
    out = get_benchmark("mvbench").aggregate(rows)
    assert out["by_task"] == {"clevrer": 1.0, "sta": 0.5} and out["score"] == pytest.approx(0.75)
    clip = get_benchmark("mvbench").adapt(_rec(3, start=1.5, end=9.0))
    assert (clip.video_start, clip.video_end) == (1.5, 9.0)


def test_stvg_parts():
    boxed = '<answer>{"time": [1, 2], "boxes": {"1": [0, 0, 4, 4]}}</answer>'
    rows = [
        (_rec(0, solution=boxed), {"accuracy": 0.75, "tiou": 1.0, "box_iou": 0.5}),
        (_rec(1, solution=boxed), {"accuracy": 0.0, "failed": True}),  # a failure counts 0
        # no ground-truth boxes: scored on tIoU alone, not in the box mean
        (_rec(2, solution='<answer>{"time": [1, 2], "boxes": {}}</answer>'), {"accuracy": 1.0, "tiou": 1.0}),
    ]
    out = get_benchmark("stvg").aggregate(rows)
    assert (out["score"], out["m_tiou"], out["m_box_iou"]) == (0.5833333333333334, 2 / 3, 0.25)


def test_generic_prompt_takes_the_reward_tasks_instruction():
    rec = _rec(0, options=[f"{c}. x" for c in "ABCDEF"], problem_type="multiple choice")
    assert render_prompt(rec).endswith(answer_instruction("multiple choice", rec.options))
    assert "(A, B, C, D, E, or F)" in render_prompt(rec)
    assert render_prompt(rec, "thinking").endswith(
        answer_instruction("multiple choice", rec.options, reasoning=True)
    )
    for ptype in ("mcq", "tvg", "stvg", "spatiotemporal_grounding", "SSR", "REC"):
        assert render_prompt(_rec(1, problem_type=ptype)).endswith(answer_instruction(ptype))
    with pytest.raises(ValueError, match="unknown prompt style"):
        render_prompt(rec, "chatty")
    with pytest.raises(UnknownBenchmarkError, match="unknown benchmark 'nope'"):
        get_benchmark("nope")


def test_ovobench_task_category_total_macro():
    rows = [
        (_rec(0, ovo_task="EPM", ovo_category="backward"), {"accuracy": 1.0}),
        (_rec(1, ovo_task="EPM", ovo_category="backward"), {"accuracy": 0.0}),
        (_rec(2, ovo_task="ASI", ovo_category="backward"), {"accuracy": 1.0}),
        (_rec(3, ovo_task="REC", ovo_category="forward"), {"accuracy": 0.0}),
    ]
    out = get_benchmark("ovobench").aggregate(rows)
    assert out["by_task"] == {"ASI": 1.0, "EPM": 0.5, "REC": 0.0}
    assert out["by_category"] == {"backward": 0.75, "forward": 0.0} and out["score"] == pytest.approx(0.375)


def test_livesports_and_odv_breakdowns():
    rows = [
        (_rec(0, q_type_livesports="Who", ocr_livesports="ocr"), {"accuracy": 1.0}),
        (_rec(1, q_type_livesports="Who", ocr_livesports="non-ocr"), {"accuracy": 0.0}),
        (_rec(2, q_type_livesports="When", ocr_livesports="non-ocr"), {"accuracy": 1.0}),
    ]
    out = get_benchmark("livesports3k_qa").aggregate(rows)
    assert out["by_question_type"] == {"When": 1.0, "Who": 0.5} and out["by_ocr"] == {
        "non-ocr": 0.5,
        "ocr": 1.0,
    }
    rows = [
        (_rec(0, odv_task="t1", odv_subtask="a"), {"accuracy": 1.0}),
        (_rec(1, odv_task="t1", odv_subtask="b"), {"accuracy": 0.0}),
    ]
    out = get_benchmark("odvbench").aggregate(rows)
    assert out["by_task"] == {"t1": 0.5} and out["by_subtask"] == {"a": 1.0, "b": 0.0}
    assert len(list_benchmarks()) >= 25  # 24 video benchmarks + synthetic


def test_breakdown_labels_keep_falsy_values():
    assert [label(v) for v in (None, "", "  ", 0, 1, False, True, "ocr")] == [
        "unknown", "unknown", "unknown", "0", "1", "false", "true", "ocr",
    ]  # fmt: skip
    rows = [
        (_rec(0, q_type_livesports="Who", ocr_livesports=0), {"accuracy": 1.0}),
        (_rec(1, q_type_livesports="Who", ocr_livesports=1), {"accuracy": 0.0}),
        (_rec(2, q_type_livesports="Who"), {"accuracy": 1.0}),
    ]
    out = get_benchmark("livesports3k_qa").aggregate(rows)
    assert out["by_ocr"] == {"0": 1.0, "1": 0.0, "unknown": 1.0}


def test_judge_less_samples_leave_the_headline_and_proxies_keep_their_names():
    rows = [
        (_rec(0, problem_type="open-ended"), {"scored": False, "not_scored_reason": "judge", "rouge_l": 0.9}),
        (_rec(1, problem_type="multiple choice"), {"accuracy": 1.0}),
        (_rec(2, problem_type="multiple choice"), {"accuracy": 0.0, "failed": True}),  # still wrong
    ]
    out = get_benchmark("vcrbench").aggregate(rows)
    assert out["score"] == 0.5 and out["by_type"] == {"multiple choice": 0.5}
    assert out["not_scored"] == 1 and out["not_scored_reasons"] == {"judge": 1}
    assert out["rouge_l_proxy"] == 0.9
    only_judged = get_benchmark("videoreasonbench").aggregate(rows[:1])
    assert only_judged["score"] is None and only_judged["not_scored"] == 1


def test_every_benchmark_declares_its_official_settings():
    for name in list_benchmarks():
        spec = get_benchmark(name)
        assert spec.max_new_tokens >= 256 and spec.metric and spec.prompt_source
    assert get_benchmark("videoreasonbench").max_new_tokens >= 4096  # its official config
    assert {n for n in list_benchmarks() if get_benchmark(n).needs_judge} == {
        "mmvu", "videommlu", "vcrbench", "videoreasonbench",
    }  # fmt: skip
