"""Fixtures shared by the reward tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from easyvideor1.rewards import RewardConfig, compute_score

# The shared benchmark annotation files sit next to the checkout (tests skip cleanly without them).
from tests.conftest import ANNOTATIONS  # noqa: F401  (re-exported: one place finds ../shared)

COLOURS = ["A. red", "B. green", "C. blue", "D. yellow"]

Scorer = Callable[..., dict[str, Any]]


@pytest.fixture
def strict_config() -> RewardConfig:
    """Default weights, but exceptions inside tasks propagate (a bug fails the test loudly)."""
    return RewardConfig(strict=True)


@pytest.fixture
def score(strict_config: RewardConfig) -> Scorer:
    """`compute_score` with the strict configuration unless a test passes its own `config`."""

    def scorer(
        response: str, ground_truth: Any, problem_type: str, options: Any = None, **meta: Any
    ) -> dict[str, Any]:
        config = meta.pop("config", strict_config)
        return compute_score(response, ground_truth, problem_type, options, config=config, **meta)

    return scorer
