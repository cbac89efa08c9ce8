"""Real benchmark annotation files: a gold answer in the benchmark's own form scores 1.0, for every record."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from easyvideor1.rewards import compute_scores, extract_choice, validate_problem_types
from easyvideor1.rewards.parsing import parse_ground_truth

from .conftest import ANNOTATIONS

FILES = sorted(ANNOTATIONS.glob("*.json*")) if ANNOTATIONS.is_dir() else []
PARAMS = [pytest.param(path, id=path.name) for path in FILES] or [
    pytest.param(None, marks=pytest.mark.skip(reason=f"{ANNOTATIONS} is absent"))
]


def load_records(path: Path) -> list[dict]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return json.loads(path.read_text())


def item(record: dict, response: str) -> dict:
    fields = {key: value for key, value in record.items() if key not in ("solution", "problem")}
    return {**fields, "response": response, "ground_truth": record["solution"]}


@pytest.fixture(scope="module", params=PARAMS)
def records(request) -> list[dict]:
    return load_records(request.param)


def test_problem_types_are_known(records) -> None:
    validate_problem_types({record["problem_type"] for record in records})


def test_gold_answers_score_one(records) -> None:
    items = [item(r, f"<answer>{parse_ground_truth(r['solution'])}</answer>") for r in records]
    # the benchmark's own form too, where it is a tagged answer
    items += [item(r, r["solution"]) for r in records if "<answer>" in r["solution"]]
    results = compute_scores(items, workers=0)
    failures = [
        (i["response"][:80], r)
        for i, r in zip(items, results, strict=True)
        if r["accuracy"] != 1.0 or "error" in r
    ]
    assert not failures, failures[:3]
    assert all(r["format"] == 1.0 for r in results)


def _perturbed(record: dict) -> str | None:
    truth = parse_ground_truth(record["solution"])
    kind = record["problem_type"]
    if kind == "multiple choice":
        count = len(record["options"])
        if count < 2:
            return None
        return chr(ord("A") + (ord(truth) - ord("A") + 1) % count)
    if kind in ("numerical", "regression"):
        return str(float(truth) * 3 + 1)
    if "grounding" in kind:
        value = json.loads(truth)
        start, end = value["time"]
        value["time"] = [end + 5, end + 10]
        return json.dumps(value)
    if kind in ("open-ended", "caption"):
        return "zebra quantum marmalade"
    return None


def test_wrong_answers_score_below_one(records) -> None:
    pairs = [(r, _perturbed(r)) for r in records]
    items = [item(r, f"<answer>{wrong}</answer>") for r, wrong in pairs if wrong is not None]
    assert items
    assert all(result["accuracy"] < 1.0 for result in compute_scores(items, workers=0))


def test_evaluation_extraction_of_gold_letters(records) -> None:
    for record in records:
        if record["problem_type"] == "multiple choice":
            letter = re.sub(r"</?answer>", "", record["solution"])
            choice = extract_choice(f"Therefore, the final answer is: {letter}", record["options"])
            assert (choice.letter, choice.status) == (letter, "ok")
