"""What a task function receives (`Sample`) and returns (`TaskScore`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from easyvideor1.rewards.config import RewardConfig
from easyvideor1.rewards.parsing import ExtractedAnswer, extract_answer, parse_ground_truth, strip_think

from ..errors import UserError


class GroundTruthError(UserError):
    """The record's ground truth cannot be read for its task (a data bug, reported as an error)."""


@dataclass
class Sample:
    """One response to score, with its record.

    Attributes:
        response: the decoded model response, exactly as generated (never rewritten).
        ground_truth: the record's answer in the benchmark's own form.
        task: canonical task name (after alias resolution).
        problem_type: the record's own spelling of the task (e.g. "svg-code", "REC").
        options: multiple-choice options ("A. ..."), or None.
        meta: every other record field (`box_format`, `width`, `test_cases`, `response_length`, ...).
        config: the reward configuration.
    """

    response: str
    ground_truth: Any
    task: str
    problem_type: str
    options: list[str] | None = None
    meta: Mapping[str, Any] = field(default_factory=dict)
    config: RewardConfig = field(default_factory=RewardConfig)

    @cached_property
    def answer(self) -> ExtractedAnswer:
        """The stated answer of the response (tag, final statement, boxed, or text)."""
        return extract_answer(self.response)

    @cached_property
    def body(self) -> str:
        """The response without its reasoning blocks."""
        return strip_think(self.response)

    @cached_property
    def truth(self) -> str:
        """The answer inside the ground truth (tags, `$...$` and data quirks removed)."""
        return parse_ground_truth(self.ground_truth)

    def truth_json(self) -> Any:
        """The ground truth parsed as JSON; raises `GroundTruthError` when it is not JSON."""
        if isinstance(self.ground_truth, (dict, list)):
            return self.ground_truth
        try:
            return json.loads(self.truth)
        except ValueError as error:
            raise GroundTruthError(f"{self.task} ground truth is not JSON: {self.truth[:200]!r}") from error


@dataclass
class TaskScore:
    """A task's verdict on one response.

    Attributes:
        accuracy: task score in [0, 1].
        well_formed: whether the `<answer>` content has the task's shape (a letter, one number, the
            expected JSON, ...). None means "any non-empty content", for tasks without a shape rule.
        prediction: the answer the task read from the response, as text, or None when it found
            none (lets evaluation report extraction failures separately from wrong answers).
        details: extra numbers to log (e.g. `tiou`, `box_iou`, `tests_passed`).
    """

    accuracy: float
    well_formed: bool | None = None
    prediction: str | None = None
    details: dict[str, float] = field(default_factory=dict)
