"""Every shipped benchmark record loads, renders a prompt, scores its gold answer as right and a
wrong one as wrong (through the training reward library); metrics match hand-computed values."""

from __future__ import annotations

import json
import re

import pytest

from easyvideor1.data.records import parse_record
from easyvideor1.evaluation import get_benchmark, list_benchmarks, render_prompt
from easyvideor1.rewards import score_record
from tests.conftest import ANNOTATIONS

_INNER = re.compile(r"<(answer|think)>(.*?)</\1>", re.S)


def gold_and_wrong(rec) -> tuple[str, str]:
    """The gold answer as a model would write it, and a wrong one of the same shape."""
    m = _INNER.search(rec.answer)
    inner = (m.group(2) if m else rec.answer).strip()
    if rec.options:
        letters = [o.strip()[0] for o in rec.options]
        # another listed letter; a one-option question (MotionBench has some) gets the next letter
        wrong = next((x for x in letters if x != inner), chr(ord(inner[0]) + 1))
    elif inner.startswith("{"):
        gt = json.loads(inner)
        gt["time"] = [gt["time"][0] + 1000, gt["time"][1] + 1001]
        wrong = json.dumps(gt)
    else:
        try:
            wrong = str(float(inner) * 3 + 7)
        except ValueError:
            wrong = "zebra quantum harmonica"
    return f"<answer>{inner}</answer>", f"<answer>{wrong}</answer>"


@pytest.mark.skipif(not ANNOTATIONS.exists(), reason="../shared/benchmarks/annotations is not present")
@pytest.mark.parametrize("name", [n for n in list_benchmarks() if n != "synthetic"])
def test_every_record_loads_renders_and_scores(name):
    spec = get_benchmark(name)
    if not (ANNOTATIONS / spec.annotation).exists():
        pytest.skip(f"{spec.annotation} is not among the shipped annotation files")
    records = spec.load(str(ANNOTATIONS))
    assert records
    wrong_scored_right = []
    for rec in records:
        prompt = render_prompt(rec, "direct")
        assert "<answer></answer>" in prompt and len(prompt) > 40
        gold, wrong = gold_and_wrong(rec)
        right = score_record(gold, rec)
        assert right["accuracy"] == 1.0, (rec.source, gold, right)
        bad = score_record(wrong, rec)
        if bad["accuracy"] >= 1.0:
            wrong_scored_right.append(rec.source)
    assert not wrong_scored_right, wrong_scored_right[:5]
    rows = [(r, {"accuracy": 1.0, "tiou": 1.0, "box_iou": 1.0}) for r in records]
    assert spec.aggregate(rows)["score"] == pytest.approx(1.0)


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
    rows = [(_rec(0), {"accuracy": 0.75, "tiou": 1.0, "box_iou": 0.5}), (_rec(1), {"accuracy": 0.0})]
    out = get_benchmark("stvg").aggregate(rows)
    assert (out["score"], out["m_tiou"], out["m_box_iou"]) == (0.375, 0.5, 0.25)


def test_prompt_lists_the_real_option_letters():
    rec = _rec(0, options=[f"{c}. x" for c in "ABCDEF"], problem_type="multiple choice")
    assert "(A, B, C, D, E, or F)" in render_prompt(rec)
    assert "<think>" not in render_prompt(rec, "thinking") and "Think briefly" in render_prompt(
        rec, "thinking"
    )
    with pytest.raises(KeyError, match="unknown benchmark"):
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


# ---------------------------------------------------------------------------------------------------
# The seven benchmarks whose files are not shipped: records written in their documented unified
# format (reference section 7.1: problem_id, problem, options, solution, problem_type, path, data_type
# and each benchmark's own fields) load, render, score gold right and wrong wrong, and aggregate.
_MC = {"problem_type": "multiple choice", "data_type": "video"}
UNSHIPPED = {
    "ovobench": [
        {
            **_MC,
            "options": ["A. red", "B. blue", "C. green", "D. black"],
            "solution": "<answer>C</answer>",
            "ovo_task": "EPM",
            "ovo_category": "backward",
            "ovo_id": 1,
            "ovo_test_idx": 0,
        },
        {
            "problem_type": "numerical",
            "data_type": "video",
            "solution": "<answer>3</answer>",
            "ovo_task": "REC",
            "ovo_category": "forward",
            "ovo_id": 2,
            "ovo_test_idx": 1,
        },
        {
            **_MC,
            "options": ["A. Yes", "B. No"],
            "solution": "<answer>A</answer>",
            "ovo_type": 1,
            "ovo_task": "SSR",
            "ovo_category": "forward",
            "ovo_id": 3,
            "ovo_test_idx": 2,
        },
        {
            **_MC,
            "options": ["A. Yes", "B. No"],
            "solution": "<answer>B</answer>",
            "ovo_type": 0,
            "ovo_task": "CRR",
            "ovo_category": "forward",
            "ovo_id": 4,
            "ovo_test_idx": 3,
        },
    ],
    "odvbench": [
        {
            **_MC,
            "options": ["A. left", "B. right", "C. up", "D. down"],
            "solution": "<answer>D</answer>",
            "odv_task": "direction",
            "odv_subtask": "ego",
            "path": "12_drive_s3_e9.mp4",
        },
    ],
    "livesports3k_qa": [
        {
            **_MC,
            "options": ["A: #10", "B: #23", "C: #7", "D: #30"],
            "solution": "<answer>B</answer>",
            "q_type_livesports": "Who",
            "ocr_livesports": True,
        },
        {
            **_MC,
            "options": ["A: 1st quarter", "B: 2nd quarter", "C: 3rd quarter", "D: 4th quarter"],
            "solution": "<answer>A</answer>",
            "q_type_livesports": "When",
            "ocr_livesports": False,
        },
    ],
    "minerva": [
        {**_MC, "options": [f"{c}. option {c}" for c in "ABCDE"], "solution": "<answer>E</answer>"},
    ],
    "vcrbench": [
        {**_MC, "options": ["A. 2", "B. 3", "C. 4", "D. 5"], "solution": "<answer>B</answer>"},
        {
            "problem_type": "open-ended",
            "data_type": "video",
            "solution": "<answer>The man puts the cup on the table after pouring the tea</answer>",
        },
    ],
    "videoreasonbench": [
        {
            "problem_type": "open-ended",
            "data_type": "video",
            "solution": "<answer>The third cup hides the ball at the end</answer>",
        },
    ],
    "tempcompass": [
        {
            **_MC,
            "options": ["A. faster", "B. slower"],
            "solution": "<answer>A</answer>",
            "original_question_type": "speed",
        },
        {
            **_MC,
            "options": ["A. clockwise", "B. anticlockwise", "C. not rotating"],
            "solution": "<answer>C</answer>",
            "original_question_type": "direction",
        },
    ],
}


@pytest.mark.parametrize("name", sorted(UNSHIPPED))
def test_unshipped_benchmarks_in_their_documented_format(name, tmp_path):
    spec = get_benchmark(name)
    rows = [
        {
            "problem_id": f"{name}-{i}",
            "problem": "What happens in the video?",
            "path": f"v{i}.mp4",
            "data_source": name,
            **r,
        }
        for i, r in enumerate(UNSHIPPED[name])
    ]
    (tmp_path / spec.annotation).write_text(json.dumps(rows))
    records = spec.load(str(tmp_path))
    assert [r.problem_id for r in records] == [r["problem_id"] for r in rows]
    scored = []
    for rec in records:
        assert "<answer></answer>" in render_prompt(rec, "direct")
        gold, wrong = gold_and_wrong(rec)
        assert score_record(gold, rec)["accuracy"] == 1.0, (name, gold)
        assert score_record(wrong, rec)["accuracy"] < 1.0, (name, wrong)
        scored.append((rec, {"accuracy": 1.0}))
    out = spec.aggregate(scored)
    assert out["score"] == pytest.approx(1.0)
    if name == "ovobench":  # task -> category -> total
        assert set(out["by_category"]) == {"backward", "forward"} and set(out["by_task"]) == {
            "EPM",
            "REC",
            "SSR",
            "CRR",
        }
