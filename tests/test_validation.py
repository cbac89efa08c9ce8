"""Numbers that are not numbers and sizes that cannot fit are refused at start-up, naming the key
or flag (``validation.py``, ``config_loading.py``, ``cli/common.py``)."""

from __future__ import annotations

import argparse

import pytest

from easyvideor1.cli.common import frame_size, number_above_zero
from easyvideor1.config import load_config
from easyvideor1.errors import ConfigError


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("reward.accuracy_weight=nan", "reward.accuracy_weight must be a finite number, got nan"),
        ("reward.numeric_abs_tol=nan", "reward.numeric_abs_tol must be a finite number, got nan"),
        ("reward.math_timeout_s=nan", "reward.math_timeout_s must be a finite number, got nan"),
        ("reward.format_weight=inf", "reward.format_weight must be a finite number, got inf"),
        (
            "reward.task_weights.counting.accuracy=-inf",
            "reward.task_weights.counting.accuracy must be a finite",
        ),
        ("rollout.n=100000", "rollout.n must be <= 1024: every group of a step is generated"),
    ],
)
def test_non_finite_floats_and_oversized_groups_are_refused_naming_the_key(
    override: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(overrides=[override])
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (frame_size, "100000x100000", "must be <= 8192"),
        (number_above_zero(float), "nan", "must be a finite number, got"),
        (number_above_zero(float), "inf", "must be a finite number, got"),
    ],
)
def test_flags_refuse_sizes_that_cannot_fit_and_non_finite_numbers(parse, text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        parse(text)
    assert frame_size("7680x4320") == (7680, 4320)
