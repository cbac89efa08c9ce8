"""Task registry: name normalisation, aliases, start-up validation, user task files and reward functions."""

from __future__ import annotations

from pathlib import Path

import pytest

from easyvideor1.rewards import (
    RewardConfig,
    UnknownTaskError,
    compute_score,
    compute_scores,
    register_task,
    registered_tasks,
    resolve_task,
    validate_problem_types,
)
from easyvideor1.rewards.registry import normalize_task_name

ALIASES = {
    "multiple_choice": ["multiple choice", "multiple_choice", "Multiple-Choice", "  MULTIPLE   choice "],
    "numerical": ["numerical", "number"],
    "regression": ["regression"],
    "math": ["math", "mathematics"],
    "ocr": ["ocr", "OCR"],
    "boolean": ["boolean", "binary classification", "SSR", "CRR"],
    "open_ended": ["open-ended", "open_ended", "free-form", "video qa", "video description", "caption"],
    "temporal_grounding": ["temporal grounding"],
    "spatial_grounding": ["spatial grounding"],
    "spatiotemporal_grounding": ["spatial-temporal grounding", "spatio-temporal grounding", "stvg"],
    "tracking": ["tracking"],
    "segmentation": ["segmentation"],
    "code": ["code", "coding", "svg-code", "html-code"],
    "preference": ["llava", "critic", "preference"],
    "counting": ["REC", "counting"],
}


@pytest.mark.parametrize(
    ("name", "alias"), [(name, alias) for name, aliases in ALIASES.items() for alias in aliases]
)
def test_aliases_resolve(name: str, alias: str) -> None:
    assert resolve_task(alias).name == name


def test_at_least_fourteen_tasks() -> None:
    assert set(ALIASES) <= set(registered_tasks())
    assert len(registered_tasks()) >= 14


@pytest.mark.parametrize(("raw", "normal"), [("Video QA", "video_qa"), ("a-b_c  d", "a_b_c_d"), ("_x_", "x")])
def test_normalize(raw: str, normal: str) -> None:
    assert normalize_task_name(raw) == normal


def test_validation_lists_every_unknown_type() -> None:
    assert validate_problem_types(["multiple choice", "stvg", "multiple choice"]) == {
        "multiple choice": "multiple_choice",
        "stvg": "spatiotemporal_grounding",
    }
    with pytest.raises(UnknownTaskError) as error:
        validate_problem_types(["multiple choice", "mutiple choice", "astrology"])
    message = str(error.value)
    assert "'mutiple choice'" in message and "'astrology'" in message and "did you mean" in message


def test_validation_checks_task_weight_keys() -> None:
    with pytest.raises(UnknownTaskError):
        validate_problem_types(["ocr"], RewardConfig(task_weights={"ocrr": {"accuracy": 1.0, "format": 0.0}}))


def test_duplicate_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="already registered"):

        @register_task("my_duplicate_task", aliases=["multiple choice"])
        def clash(sample):  # pragma: no cover - never called
            raise AssertionError


TASK_FILE = """
from easyvideor1.rewards import TaskScore, register_task

@register_task("Counting Sheep", aliases=["sheep"])
def count_sheep(sample):
    return TaskScore(float(sample.answer.text == sample.truth), True, sample.answer.text)
"""


def test_user_task_file(tmp_path: Path) -> None:
    path = tmp_path / "sheep.py"
    path.write_text(TASK_FILE)
    config = RewardConfig(task_files=[str(path)])
    assert validate_problem_types(["sheep"], config) == {"sheep": "counting_sheep"}
    result = compute_score("<answer>12</answer>", "12", "counting-sheep", config=config)
    assert (result["overall"], result["task"]) == (1.0, "counting_sheep")
    batch = compute_scores(
        [{"response": "<answer>3</answer>", "ground_truth": "4", "problem_type": "sheep"}], config, 0
    )
    assert batch[0]["accuracy"] == 0.0


SEQUENTIAL_FILE = """
def compute_score(reward_input, bonus=0.0):
    correct = reward_input["response"].strip() == reward_input["ground_truth"]
    return {"overall": float(correct) + bonus, "accuracy": float(correct), "source": reward_input.get("data_source")}
"""
BATCH_FILE = """
REWARD_TYPE = "batch"

def score_all(reward_inputs):
    return [{"overall": float(len(reward_inputs))} for _ in reward_inputs]
"""


def test_custom_reward_function_easyr1_convention(tmp_path: Path) -> None:
    sequential = tmp_path / "sequential.py"
    sequential.write_text(SEQUENTIAL_FILE)
    config = RewardConfig(reward_function=str(sequential), reward_function_kwargs={"bonus": 0.5})
    result = compute_score("42", "42", "anything at all", config=config, data_source="mine")
    assert result == {"task": "custom", "overall": 1.5, "accuracy": 1.0, "source": "mine"}
    assert validate_problem_types(["anything at all"], config) == {"anything at all": "anything at all"}
    batch = tmp_path / "batch.py"
    batch.write_text(BATCH_FILE)
    items = [{"response": "x", "ground_truth": "y", "problem_type": "z"}] * 3
    results = compute_scores(items, RewardConfig(reward_function=f"{batch}:score_all"), workers=0)
    assert [r["overall"] for r in results] == [3.0, 3.0, 3.0]


def test_custom_reward_function_errors_are_recorded(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("def compute_score(reward_input):\n    return {'accuracy': 1.0}\n")
    result = compute_score("x", "y", "z", config=RewardConfig(reward_function=str(broken)))
    assert result["overall"] == 0.0 and "overall" in result["error"]


def test_missing_files_fail_at_start_up(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        validate_problem_types(["ocr"], RewardConfig(task_files=[str(tmp_path / "missing.py")]))
    with pytest.raises(AttributeError):
        path = tmp_path / "empty.py"
        path.write_text("")
        validate_problem_types(["ocr"], RewardConfig(reward_function=f"{path}:nothing"))
