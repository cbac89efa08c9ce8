"""Batch scoring: process pool for expensive tasks, order, error accounting."""

from __future__ import annotations

import json

import pytest

from easyvideor1.rewards import (
    RewardConfig,
    UnknownTaskError,
    compute_score,
    compute_scores,
    error_counts,
    reset_error_counts,
    shutdown_pool,
)

from .conftest import COLOURS

CODE_TESTS = json.dumps({"test_cases": [{"input": "4", "output": "16"}]})


def mixed_items() -> list[dict]:
    items = []
    for index in range(6):
        items += [
            {"response": f"<answer>{'B' if index % 2 else 'A'}</answer>", "ground_truth": "B", "problem_type": "multiple choice", "options": COLOURS},
            {"response": "<answer>print(int(input()) ** 2)</answer>", "ground_truth": CODE_TESTS, "problem_type": "code"},
            {"response": f"<answer>{index}/4</answer>", "ground_truth": "\\frac{1}{2}", "problem_type": "math"},
            {"response": f'<answer>{{"time": [0, {index + 1}]}}</answer>', "ground_truth": '{"time": [0, 2]}', "problem_type": "temporal grounding"},
        ]  # fmt: skip
    return items


@pytest.fixture(scope="module")
def pool_results():
    items = mixed_items()
    yield items, compute_scores(items, workers=2)
    shutdown_pool()


def test_pool_matches_in_process_scoring(pool_results) -> None:
    items, pooled = pool_results
    local = compute_scores(items, workers=0)
    assert [r["overall"] for r in pooled] == pytest.approx([r["overall"] for r in local])
    assert [r["task"] for r in pooled] == [r["task"] for r in local]


def test_results_keep_item_order(pool_results) -> None:
    items, pooled = pool_results
    for item, result in zip(items, pooled, strict=True):
        expected = compute_score(
            item["response"], item["ground_truth"], item["problem_type"], item.get("options")
        )
        assert result["accuracy"] == pytest.approx(expected["accuracy"])
    assert [r["accuracy"] for r in pooled if r["task"] == "code"] == [1.0] * 6
    assert [r["accuracy"] for r in pooled if r["task"] == "math"] == [0, 0, 1, 0, 0, 0]


def test_batch_errors_are_counted_once() -> None:
    reset_error_counts()
    items = [
        {"response": "<answer>1</answer>", "ground_truth": "n/a", "problem_type": "numerical"},
        {
            "response": "<answer>print(1)</answer>",
            "ground_truth": "print(1)",
            "problem_type": "code",
        },  # no tests
        {"response": "<answer>1</answer>", "ground_truth": "1", "problem_type": "numerical"},
    ]
    results = compute_scores(items, workers=1)
    assert ["error" in r for r in results] == [True, True, False]
    assert error_counts() == {"numerical": 1, "code": 1}
    reset_error_counts()


def test_unknown_type_fails_before_scoring() -> None:
    with pytest.raises(UnknownTaskError):
        compute_scores([{"response": "", "ground_truth": "", "problem_type": "horoscope"}], workers=0)


def test_config_reaches_workers() -> None:
    config = RewardConfig(accuracy_weight=0.5, format_weight=0.5)
    items = [
        {
            "response": "<answer>print(int(input()) ** 2)</answer>",
            "ground_truth": CODE_TESTS,
            "problem_type": "code",
        }
    ]
    assert compute_scores(items, config, workers=1)[0]["overall"] == pytest.approx(1.0)
    items[0]["response"] = "```python\nprint(int(input()) ** 2)\n```"
    assert compute_scores(items, config, workers=1)[0]["overall"] == pytest.approx(0.5)
    shutdown_pool()


def test_score_records_equals_scoring_each_record_alone() -> None:
    """Training and validation score a step's responses as one batch (math in the pool): the same
    results as the per-row call evaluation keeps, record fields passed as metadata except those
    named like the scoring arguments."""
    from easyvideor1.data.records import parse_record
    from easyvideor1.rewards import score_record, score_records

    rows = [
        {"problem": "q", "answer": "B", "problem_type": "multiple choice", "options": COLOURS, "response": "x"},
        {"problem": "q", "answer": "0.5", "problem_type": "math", "config": 3},
        {"problem": "q", "answer": "A", "problem_type": "multiple choice", "options": COLOURS},
    ]  # fmt: skip
    records = [parse_record(r, f"t[{i}]") for i, r in enumerate(rows)]
    responses = ["<answer>B</answer>", "<answer>1/2</answer>", "<answer>B</answer>"]
    lengths = [4, 5, 4]
    batch = score_records(responses, records, lengths, RewardConfig(), workers=1)
    alone = [
        score_record(t, r, response_length=n) for t, r, n in zip(responses, records, lengths, strict=True)
    ]
    assert [(b["task"], b["accuracy"], b["overall"]) for b in batch] == [
        (a["task"], a["accuracy"], a["overall"]) for a in alone
    ]
    assert [b["task"] for b in batch] == ["multiple_choice", "math", "multiple_choice"]
    assert [b["accuracy"] for b in batch][::2] == [1.0, 0.0]
    with pytest.raises(ValueError, match="2 responses, 3 records"):
        score_records(responses[:2], records, lengths)
    shutdown_pool()
