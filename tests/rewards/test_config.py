"""RewardConfig: defaults, validation, and use as an OmegaConf structured config."""

from __future__ import annotations

import pickle

import pytest

from easyvideor1.rewards import RewardConfig, SandboxConfig, TaskWeights
from easyvideor1.rewards.registry import weights_for


def test_defaults() -> None:
    config = RewardConfig()
    assert (config.accuracy_weight, config.format_weight) == (0.9, 0.1)
    assert config.require_think is False and config.overlong_buffer is None
    assert config.default_box_format == "pixel"
    assert config.llm_judge is None and config.reward_function is None
    assert config.sandbox.wall_time_s > 0 and config.sandbox.max_processes > 1
    assert weights_for(config, "ocr") == TaskWeights(0.9, 0.1)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"accuracy_weight": -0.1},
        {"default_box_format": "inches"},
        {"overlong_buffer": 100, "overlong_max_length": 50},  # removed keys
        {"numeric_rel_tol": -1},
        {"math_timeout_s": 0},
    ],
)
def test_invalid_values(kwargs) -> None:
    with pytest.raises(ValueError):
        RewardConfig(**kwargs)


def test_nested_dicts_are_converted() -> None:
    config = RewardConfig(
        sandbox={"wall_time_s": 1.0}, task_weights={"stvg": {"accuracy": 1.0, "format": 0.0}}
    )
    assert config.sandbox == SandboxConfig(wall_time_s=1.0)
    assert weights_for(config, "spatiotemporal_grounding") == TaskWeights(1.0, 0.0)


def test_picklable_for_worker_processes() -> None:
    config = RewardConfig(task_weights={"ocr": TaskWeights(0.5, 0.5)})
    assert pickle.loads(pickle.dumps(config)) == config


def test_omegaconf_structured() -> None:
    omegaconf = pytest.importorskip("omegaconf")
    base = omegaconf.OmegaConf.structured(RewardConfig)
    merged = omegaconf.OmegaConf.merge(base, {"format_weight": 0.2, "sandbox": {"memory_mb": 256}})
    config = omegaconf.OmegaConf.to_object(merged)
    assert (
        isinstance(config, RewardConfig) and config.format_weight == 0.2 and config.sandbox.memory_mb == 256
    )
