"""The run configuration: one tree of typed dataclasses, loaded from YAML plus dotted overrides.

``easyvideor1 <command> config=run.yaml data.video_fps=1 data.cache_dir=/cache`` merges, in order,
the defaults of :class:`RunConfig`, the YAML file and the ``key=value`` overrides (EasyR1's
convention; the reading is ``config_loading.py``). Unknown keys are errors, so a typo never silently
does nothing. What the model decides (its family) is filled in once, by ``resolve.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

from .algorithms._registry import FILTERS, advantage_inputs, is_group_estimator
from .algorithms.config import AlgorithmConfig
from .algorithms.loss_options import BUILT_IN_LOSS_OPTION_KEYS
from .config_loading import load_dataclass, split_overrides, to_yaml
from .data.config import DataConfig
from .errors import ConfigError
from .evaluation.config import EvalConfig
from .plan.config import PlanConfig
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
        plan: The machine ``easyvideor1 plan`` predicts memory and time for (``plan/config.py``).
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
    plan: PlanConfig = field(default_factory=PlanConfig)

    # user algorithms registered before `algorithm` checks the names it holds
    PLUGIN_FILE_KEYS: ClassVar[tuple[str, ...]] = ("algorithm.plugin_files",)
    # keys that moved (old -> new), still read with a deprecation message naming the new key
    RENAMED_KEYS: ClassVar[dict[str, str]] = {
        f"algorithm.{key}": f"algorithm.loss_options.{key}" for key in BUILT_IN_LOSS_OPTION_KEYS
    }

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
        raise ConfigError(
            f"rollout.n={n} with algorithm.adv_estimator={cfg.algorithm.adv_estimator}: a group "
            "estimator compares the responses of one prompt, so one response gets advantage 0 "
            "(use rollout.n >= 2, or adv_estimator=reinforce_plus_plus / remax)"
        )
    if group and cfg.rollout.hybrid != "off" and k >= n:
        raise ConfigError(
            f"rollout.offline_k={k} with rollout.n={n}: hybrid groups would be all offline (identical "
            f"responses, advantage 0 under algorithm.adv_estimator={cfg.algorithm.adv_estimator}); "
            "need offline_k < n"
        )
    f = cfg.algorithm.online_filtering
    if f.enable and FILTERS.metadata(f.criterion).get("group", False) and n < 2:
        raise ConfigError(
            f"algorithm.online_filtering.criterion={f.criterion} with rollout.n={n}: a group of one "
            "never has reward spread, so every group would be dropped"
        )
    if advantage_inputs(est) and (
        cfg.algorithm.overlong.enable or (cfg.algorithm.kl.enabled and cfg.algorithm.kl.apply_as == "reward")
    ):
        raise ConfigError(
            f"algorithm.adv_estimator={cfg.algorithm.adv_estimator} works on the raw reward keys / a "
            "greedy baseline: use it without algorithm.overlong and without algorithm.kl.apply_as=reward"
        )


__all__ = ["ConfigError", "RunConfig", "load_config", "split_overrides", "to_yaml"]


def load_config(
    cls: type[T] = RunConfig,
    config_file: str | None = None,
    overrides: list[str] | None = None,
    values: dict[str, Any] | None = None,
) -> T:
    """The run config (or ``cls``) from its defaults, a YAML file, a dict of values and dotted
    overrides, in that order (:func:`~.config_loading.load_dataclass`)."""
    return load_dataclass(cls, config_file, overrides, values)
