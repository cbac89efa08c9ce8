"""95% intervals clustered by video: the standard errors against the formula worked by hand, the
reduction to the unclustered error when no video is shared, and the cases that get no interval
(one video, one sample, a headline that is not a mean over samples) with their reason."""

from __future__ import annotations

import dataclasses
import math

import pytest

from easyvideor1.data.records import parse_record
from easyvideor1.evaluation import get_benchmark
from easyvideor1.evaluation.uncertainty import INTERVAL_KEYS, Z95, clustered_stderr, video_clusters


def _rec(i, video: str | None = "v.mp4", **fields):
    media = {"videos": [video]} if video else {}
    return parse_record({"problem_id": str(i), "problem": "q", **media, **fields}, f"f[{i}]")


def _rows(videos_and_scores, **fields):
    return [(_rec(i, video, **fields), {"accuracy": s}) for i, (video, s) in enumerate(videos_and_scores)]


# 3 videos with 2, 1 and 3 questions, each video all right or all wrong (./c.mp4 is c.mp4)
THREE_VIDEOS = [
    ("a.mp4", 1.0),
    ("a.mp4", 1.0),
    ("b.mp4", 0.0),
    ("c.mp4", 0.0),
    ("c.mp4", 0.0),
    ("./c.mp4", 0.0),
]


def test_clustered_stderr_matches_the_formula_by_hand():
    # mean 1/3; deviations 2/3, 2/3 | -1/3 | -1/3 x3; sum of squares 4/3; cluster sums 4/3, -1/3, -1
    # stderr^2 = (4/3) / (6 * 5) = 2/45
    # stderr_clustered^2 = ((4/3)^2 + (1/3)^2 + 1^2 + (4/3) / 5) / 6^2 = (26/9 + 4/15) / 36 = 71/810
    out = get_benchmark("videomme").aggregate(_rows(THREE_VIDEOS))
    assert out["score"] == pytest.approx(1 / 3) and out["n_clusters"] == 3
    assert out["stderr"] == pytest.approx(math.sqrt(2 / 45))
    assert out["stderr_clustered"] == pytest.approx(math.sqrt(71 / 810))
    assert out["stderr_clustered"] > out["stderr"] * 1.3, "questions of one video move together"
    assert out["ci95"] == pytest.approx([0.0, 1 / 3 + Z95 * math.sqrt(71 / 810)])  # clipped at 0
    assert out["ci95_reason"] is None
    # lmms-eval's form: the unclustered variance plus the within-video cross terms over n^2
    scores = [s for _, s in THREE_VIDEOS]
    d, video = [s - 1 / 3 for s in scores], [0, 0, 1, 2, 2, 2]
    cross = sum(d[i] * d[j] for i in range(6) for j in range(6) if i != j and video[i] == video[j])
    assert clustered_stderr(scores, video_clusters([r for r, _ in _rows(THREE_VIDEOS)])) == pytest.approx(
        math.sqrt(2 / 45 + cross / 36)
    )


def test_distinct_videos_and_questions_without_one_give_the_unclustered_error():
    rows = _rows([("a.mp4", 1.0), ("b.mp4", 0.0), (None, 1.0), (None, 1.0), ("c.mp4", 0.5)])
    out = get_benchmark("videomme").aggregate(rows)
    assert out["n_clusters"] == 5, "a question without a video is its own cluster"
    assert out["stderr_clustered"] == pytest.approx(out["stderr"])
    assert out["stderr"] == pytest.approx(math.sqrt(sum((s - 0.7) ** 2 for s in (1, 0, 1, 1, 0.5)) / (5 * 4)))
    lo, hi = out["ci95"]
    assert lo == pytest.approx(0.7 - Z95 * out["stderr"]) and hi == 1.0


@pytest.mark.parametrize(
    ("benchmark", "rows", "reason", "stderr"),
    [
        ("videomme", _rows([("a.mp4", 1.0), ("a.mp4", 0.0), ("a.mp4", 1.0)]), "one video", 1 / 3),
        ("videomme", _rows([("a.mp4", 1.0)]), "1 scored sample", None),
        ("videomme", [(_rec(0), {"scored": False, "not_scored_reason": "judge"})], "0 scored samples", None),
        ("vsibench", _rows([("a.mp4", 1.0), ("b.mp4", 0.0)], original_question_type="count"), "macro", None),
        ("videomathqa", _rows([("a.mp4", 1.0), ("b.mp4", 0.0)], mbinary_id=1), "binary pairs", None),
    ],
    ids=["one-video", "one-sample", "nothing-scored", "macro", "multi-binary"],
)
def test_no_interval_says_why(benchmark, rows, reason, stderr):
    out = get_benchmark(benchmark).aggregate(rows)
    assert out["ci95"] is None and out["stderr_clustered"] is None and reason in out["ci95_reason"]
    assert out["stderr"] == (None if stderr is None else pytest.approx(stderr))


def test_breakdown_groups_get_their_own_interval_and_other_aggregations_none():
    rows = _rows(THREE_VIDEOS)
    rows = [(dataclasses.replace(rec, extra={"duration": "long" if i < 3 else "short"}), res) for i, (rec, res) in
            enumerate(rows)]  # fmt: skip
    out = get_benchmark("videomme").aggregate(rows)
    assert out["by_duration"] == {"long": pytest.approx(2 / 3), "short": 0.0}
    long_ = out["ci95_breakdowns"]["by_duration"]["long"]
    # a, a | b: mean 2/3, cluster sums 2/3, -2/3, squares 2/3: SE^2 = (8/9 + (2/3) / 2) / 9 = 11/81
    half = Z95 * math.sqrt(11 / 81)
    assert long_ == pytest.approx([max(0.0, 2 / 3 - half), min(1.0, 2 / 3 + half)])
    assert out["ci95_breakdowns"]["by_duration"]["short"] is None, "the short group is one video"
    vsi = get_benchmark("vsibench").aggregate(rows)
    assert set(vsi["ci95_breakdowns"]) == {"by_task"} and vsi["ci95"] is None
    custom = dataclasses.replace(get_benchmark("videomme"), aggregator=lambda rows: {"score": 0.5})
    out = custom.aggregate(rows)
    assert {k: out[k] for k in INTERVAL_KEYS} == {
        "stderr": None,
        "stderr_clustered": None,
        "ci95": None,
        "ci95_reason": "the benchmark's own aggregation names no per-sample mean",
        "n_clusters": None,
    }
