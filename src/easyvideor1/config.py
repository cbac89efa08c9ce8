"""The run configuration: one tree of typed dataclasses, loaded from YAML plus dotted overrides.

``easyvideor1 <command> config=run.yaml data.video_fps=1 data.cache_dir=/cache`` merges, in order,
the defaults of :class:`RunConfig`, the YAML file and the ``key=value`` overrides (EasyR1's
convention). Unknown keys are errors, so a typo never silently does nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from .algorithms._registry import FILTERS, advantage_inputs, is_group_estimator, load_plugin_files
from .algorithms.config import AlgorithmConfig
from .data.config import DataConfig
from .errors import ConfigError
from .evaluation.config import EvalConfig
from .rewards.config import RewardConfig
from .rollout.config import RolloutConfig
from .threads import CPUConfig
from .tools.config import ToolsConfig
from .trainer.config import DemoConfig, DistributedConfig, ModelConfig, TrainerConfig

T = TypeVar("T")


@dataclass
class RunConfig:
    """Everything one run needs, one section per pillar (each documented in its own module).

    Attributes:
        data: Data files, frame sampling budgets, the frame cache and the prompt template
            (``data/config.py``).
        model: The policy checkpoint, its dtype, LoRA, gradient checkpointing (``trainer/config.py``).
        rollout: Sampling, the rollout engine, hybrid groups, overlapping rollouts
            (``rollout/config.py``).
        algorithm: Advantage estimator, policy loss, aggregation, KL, dynamic sampling, rollout
            correction (``algorithms/config.py``).
        reward: Reward tasks, their weights, the sandbox and the judge (``rewards/config.py``).
        trainer: The training loop: steps, batch sizes, optimizer, validation, checkpoints,
            loggers, evaluation during training (``trainer/config.py``).
        distributed: torchrun, FSDP2 and sequence parallelism (``trainer/config.py``).
        demo: The embedded demo's assets (``trainer/config.py``).
        eval: How ``easyvideor1 eval`` / ``score`` run benchmarks (``evaluation/config.py``).
        tools: Video tools the policy may call in an episode (``tools/config.py``).
        cpu: CPU threads of every process (``threads.py``).
    """

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    distributed: DistributedConfig = field(default_factory=DistributedConfig)
    demo: DemoConfig = field(default_factory=DemoConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    cpu: CPUConfig = field(default_factory=CPUConfig)

    def __post_init__(self) -> None:
        _check_across_sections(self)


def _check_across_sections(cfg: RunConfig) -> None:
    """Settings that are each valid but make no sense together."""
    est = cfg.algorithm.adv_estimator
    # a group estimator's baseline is the other responses of the prompt's group (declared at
    # registration, `group=True`): with one response per prompt every advantage is exactly 0
    group = is_group_estimator(est)
    n, k = cfg.rollout.n, cfg.rollout.offline_k
    if group and n < 2:
        raise ValueError(
            f"rollout.n={n} with algorithm.adv_estimator={cfg.algorithm.adv_estimator}: a group "
            "estimator compares the responses of one prompt, so one response gets advantage 0 "
            "(use rollout.n >= 2, or adv_estimator=reinforce_plus_plus / remax)"
        )
    if group and cfg.rollout.hybrid != "off" and k >= n:
        raise ValueError(
            f"rollout.offline_k={k} with rollout.n={n}: hybrid groups would be all offline (identical "
            f"responses, advantage 0 under algorithm.adv_estimator={cfg.algorithm.adv_estimator}); "
            "need offline_k < n"
        )
    f = cfg.algorithm.online_filtering
    if f.enable and FILTERS.metadata(f.criterion).get("group", False) and n < 2:
        raise ValueError(
            f"algorithm.online_filtering.criterion={f.criterion} with rollout.n={n}: a group of one "
            "never has reward spread, so every group would be dropped"
        )
    if advantage_inputs(est) and (
        cfg.algorithm.overlong.enable or (cfg.algorithm.kl.enabled and cfg.algorithm.kl.apply_as == "reward")
    ):
        raise ValueError(
            f"algorithm.adv_estimator={cfg.algorithm.adv_estimator} works on the raw reward keys / a "
            "greedy baseline: use it without algorithm.overlong and without algorithm.kl.apply_as=reward"
        )


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
            merged = OmegaConf.merge(merged, _load_yaml(config_file))
        if values:
            merged = OmegaConf.merge(merged, OmegaConf.create(values))
        for override in overrides or []:
            merged = OmegaConf.merge(merged, _parse_override(override))
        plugins = OmegaConf.select(merged, "algorithm.plugin_files", default=None)
        if plugins:  # user algorithms registered before any section checks the names it holds
            load_plugin_files(list(plugins))
        return OmegaConf.to_object(merged)
    except OmegaConfBaseException as e:
        key = getattr(e, "full_key", None)
        msg = str(e).splitlines()[0]
        where = f" ({config_file} and overrides)" if config_file else ""
        raise ConfigError(f"invalid configuration{f' at {key}' if key else ''}{where}: {msg}") from e
    except ConfigError:
        raise
    except ValueError as e:  # a dataclass check: the message names the dotted key
        raise ConfigError(str(e)) from e


def _parse_override(override: str) -> DictConfig:
    """One ``key=value`` override; a value YAML cannot parse (``[a.jsonl``) is a ConfigError naming it."""
    try:
        return OmegaConf.from_dotlist([override])
    except yaml.YAMLError as e:
        key, _, value = override.partition("=")
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"override '{key}': cannot parse value '{value}': {problem}") from e


def _load_yaml(path: str) -> DictConfig:
    """A YAML mapping from ``path``; every way it can be unusable is a ConfigError naming the file."""
    p = Path(path)
    if not p.exists():
        raise ConfigError(f"config file not found: {path}")
    if p.is_dir():
        raise ConfigError(f"config file {path} is a directory (expected a YAML file)")
    try:
        loaded = OmegaConf.load(p)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigError(f"{path}{line}: invalid YAML ({problem})") from e
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {path} cannot be read ({e})") from e
    if not isinstance(loaded, DictConfig):
        raise ConfigError(f"{path}: a config file must be a mapping of sections, got a list")
    return loaded


def to_yaml(cfg: Any) -> str:
    return OmegaConf.to_yaml(OmegaConf.structured(cfg))
