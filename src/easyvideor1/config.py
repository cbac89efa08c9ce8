"""The run configuration: one tree of typed dataclasses, loaded from YAML plus dotted overrides.

``easyvideor1 <command> config=run.yaml data.video_fps=1 data.cache_dir=/cache`` merges, in order,
the defaults of :class:`RunConfig`, the YAML file and the ``key=value`` overrides (EasyR1's
convention). Unknown keys are errors, so a typo never silently does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .algorithms.config import AlgorithmConfig
from .data.config import DataConfig
from .rewards.config import RewardConfig
from .trainer.config import DemoConfig, ModelConfig, RolloutConfig, TrainerConfig
from .trainer.distributed import DistributedConfig

T = TypeVar("T")


@dataclass
class RunConfig:
    """Everything one run needs, one section per pillar (each documented in its own module)."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    demo: DemoConfig = field(default_factory=DemoConfig)


class ConfigError(ValueError):
    pass


def split_overrides(args: list[str]) -> tuple[str | None, list[str], list[str]]:
    """Separate ``config=FILE`` and ``key=value`` tokens from the rest of a command line."""
    config_file, overrides, rest = None, [], []
    for a in args:
        if a.startswith("config="):
            config_file = a.split("=", 1)[1]
        elif "=" in a and not a.startswith("-"):
            overrides.append(a)
        else:
            rest.append(a)
    return config_file, overrides, rest


def load_config(
    cls: type[T] = RunConfig,
    config_file: str | None = None,
    overrides: list[str] | None = None,
    values: dict[str, Any] | None = None,
) -> T:
    """Build ``cls`` from its defaults, a YAML file, a dict of values and dotted overrides (in that order)."""
    try:
        merged = OmegaConf.structured(cls)
        if config_file:
            merged = OmegaConf.merge(merged, OmegaConf.load(config_file))
        if values:
            merged = OmegaConf.merge(merged, OmegaConf.create(values))
        if overrides:
            merged = OmegaConf.merge(merged, OmegaConf.from_dotlist(overrides))
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        msg = str(e).splitlines()[0]
        raise ConfigError(f"invalid configuration{f' at {key}' if key else ''}: {msg}") from e
    except FileNotFoundError as e:
        raise ConfigError(f"config file not found: {config_file}") from e


def to_yaml(cfg: Any) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))
