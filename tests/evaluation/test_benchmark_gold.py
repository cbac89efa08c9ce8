"""Every registered benchmark, on its real annotation file (../shared) or on records written in its
documented unified format: all-gold responses score exactly 1.0 and all-wrong ones exactly 0.0 on
the headline metric and every breakdown, through the spec's own prompt, scorer and aggregate. Judge
benchmarks are scored by a deterministic stand-in judge (``reward.llm_judge``); without a judge
their judge-needing samples are "not scored", counted, and left out of the headline."""

from __future__ import annotations

from typing import Any

import pytest

from easyvideor1.evaluation import get_benchmark, list_benchmarks
from easyvideor1.evaluation.uncertainty import INTERVAL_KEYS
from tests.conftest import ANNOTATIONS
from tests.evaluation.benchmark_cases import (
    JUDGE,
    UNSHIPPED,
    gold_response,
    truth,
    write_unshipped,
    wrong_response,
)

_COUNTS = {"not_scored", "not_scored_reasons", "mbin_questions", *INTERVAL_KEYS, "ci95_breakdowns"}
NOT_IN_SHARED = set(UNSHIPPED) | {"synthetic"}


def numbers(out: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Every metric number of an aggregate (breakdowns flattened), counts, intervals and proxies left out."""
    flat = {}
    for key, value in out.items():
        if key in _COUNTS or key.endswith("_proxy"):
            continue
        if isinstance(value, dict):
            flat.update(numbers(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def load(name: str, tmp_path):
    spec = get_benchmark(name)
    if name in NOT_IN_SHARED:
        write_unshipped(name, spec.annotation, tmp_path)
        return spec, spec.load(str(tmp_path))
    if not ANNOTATIONS.exists():
        pytest.skip("../shared/benchmarks/annotations is not present")
    assert (ANNOTATIONS / spec.annotation).exists(), f"{spec.annotation} missing from {ANNOTATIONS}"
    return spec, spec.load(str(ANNOTATIONS))


def needs_judge_sample(name: str, rec) -> bool:
    """Samples whose official score is a judge's (the rest are rule-based)."""
    if name == "videoreasonbench":
        return True
    if rec.options or rec.problem_type.replace("-", " ").lower() not in ("open ended", "caption"):
        return False
    return not truth(rec).startswith("[")  # VCR-Bench spans/boxes are IoU-scored


@pytest.mark.parametrize("name", list_benchmarks())
def test_gold_scores_one_and_wrong_scores_zero(name, tmp_path):
    spec, records = load(name, tmp_path)
    assert records
    for rec in records:  # every record renders in both styles
        assert spec.build_prompt(rec, "direct") and spec.build_prompt(rec, "thinking")
    config = JUDGE if spec.needs_judge else None
    gold = [(r, spec.score_response(r, gold_response(name, r), reward_config=config)) for r in records]
    wrong = [(r, spec.score_response(r, wrong_response(name, r), reward_config=config)) for r in records]
    best, worst = spec.aggregate(gold), spec.aggregate(wrong)
    no_truth = sum(1 for r in records if name == "videoreasonbench" and truth(r) == "None")
    assert best["not_scored"] == worst["not_scored"] == no_truth
    assert numbers(best) and all(v == 1.0 for v in numbers(best).values()), numbers(best)
    assert all(v == 0.0 for v in numbers(worst).values()), numbers(worst)
    scored = [res for _, res in gold if res.get("scored") is not False]
    assert all(res["accuracy"] == 1.0 and res.get("extracted") is not None for res in scored)


@pytest.mark.parametrize("name", [n for n in list_benchmarks() if get_benchmark(n).needs_judge])
def test_without_a_judge_judged_samples_are_not_scored_and_left_out(name, tmp_path):
    spec, records = load(name, tmp_path)
    rows = [(r, spec.score_response(r, gold_response(name, r))) for r in records]
    judged = [r for r in records if needs_judge_sample(name, r)]
    assert judged, "a judge benchmark without judge-scored samples"
    for rec, res in rows:
        if needs_judge_sample(name, rec):
            assert res["scored"] is False and "accuracy" not in res and res["not_scored_reason"]
    out = spec.aggregate(rows)
    assert out["not_scored"] == len(judged)
    if len(judged) == len(records):
        assert out["score"] is None  # nothing measured: no headline, never a proxy in its place
    else:
        assert out["score"] == 1.0  # the rule-scored rest only
    proxies = {k for k in out if k.endswith("_proxy")}
    assert proxies and not proxies & {"accuracy", "score"}
