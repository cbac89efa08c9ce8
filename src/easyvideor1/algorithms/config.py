"""Typed configuration of the RL algorithms (the `algorithm` section of the run config).

Plain dataclasses, usable as OmegaConf structured configs. Every value is checked in
`__post_init__`, so a typo in an estimator name or an impossible clip range fails when the config is
built, not hours into a run. Names are checked against the registries: a user-registered estimator
or loss must be imported before the config is built.

Recipes:
* GRPO + DAPO (the reference's run): defaults.
* Dr.GRPO: `adv_estimator="dr_grpo"` (or `norm_adv_by_std=False`) and
  `loss_agg_mode="seq-mean-token-sum-norm"` with `loss_norm_length` = max response length.
* GSPO: `policy_loss="gspo"`, `loss_agg_mode="seq-mean-token-mean"`, tight clip ratios
  (`loss_options: {clip_ratio_low: 3.0e-4, clip_ratio_high: 4.0e-4}`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..validation import in_range, non_negative, positive
from ._registry import (
    ADVANTAGE_ESTIMATORS,
    FILTERS,
    KL_ESTIMATORS,
    LOSS_AGGREGATIONS,
    POLICY_LOSSES,
    UnknownAlgorithmError,
    build_options,
    load_plugin_files,
    policy_loss_options,
)
from .distill_config import DistillConfig
from .loss_options import loss_arguments
from .rollout_correction import CORRECTION_LEVELS, ROLLOUT_CORRECTIONS

# The names are checked against the torch-free registries (built-ins are declared there by name);
# the tensor code is imported only where it runs, so building a run config loads no torch.
if TYPE_CHECKING:
    from .kl import AdaptiveKLController, FixedKLController


@dataclass
class KLConfig:
    """KL regularisation towards the reference policy.

    Parameters:
        type (`str`, *optional*, defaults to `"none"`):
            Estimator: `"none"` (no reference model is needed), `"k1"`/`"kl"`, `"abs"`, `"k2"`/`"mse"`,
            `"k3"`/`"low_var_kl"` (see `algorithms/kl.py`). Off by default, as in the reference's runs.
        coef (`float`, *optional*, defaults to `1e-3`):
            Coefficient of the penalty (initial value for the adaptive controller).
        apply_as (`str`, *optional*, defaults to `"loss"`):
            `"loss"`: add `coef * KL`, aggregated like the policy loss, to the loss. `"reward"`:
            subtract `coef * KL` from the token-level rewards before the advantage estimator. One
            field, so the two cannot be switched on together by accident.
        controller (`str`, *optional*, defaults to `"fixed"`):
            `"fixed"` or `"adaptive"` (Ziegler et al.'s proportional controller).
        target (`float`, *optional*, defaults to `0.1`):
            Target KL of the adaptive controller.
        horizon (`int`, *optional*, defaults to `10000`):
            Horizon of the adaptive controller (samples over which a 20% change may happen).
    """

    type: str = "none"
    coef: float = 1e-3
    apply_as: str = "loss"
    controller: str = "fixed"
    target: float = 0.1
    horizon: int = 10000

    def __post_init__(self) -> None:
        _named("algorithm.kl.type", KL_ESTIMATORS.canonical, self.type)  # lists the known types
        non_negative("algorithm.kl.coef", self.coef)
        _check(
            self.apply_as in ("loss", "reward"),
            f"algorithm.kl.apply_as must be 'loss' or 'reward', got {self.apply_as!r}",
        )
        _check(
            self.controller in ("fixed", "adaptive"),
            f"algorithm.kl.controller must be 'fixed' or 'adaptive', got {self.controller!r}",
        )
        positive("algorithm.kl.target", self.target)
        positive("algorithm.kl.horizon", self.horizon)

    @property
    def enabled(self) -> bool:
        """True when a reference model is needed."""
        return self.type != "none"


@dataclass
class OnlineFilterConfig:
    """DAPO dynamic sampling: keep only groups with reward signal (`algorithms/filtering.py`).

    Parameters:
        enable (`bool`, *optional*, defaults to `False`):
            Generate extra rounds and train only on kept groups.
        criterion (`str`, *optional*, defaults to `"std"`):
            `"std"`: keep groups whose rewards are not all equal (exactly the groups with non-zero GRPO
            advantage). `"mean"`: keep groups whose mean `key` is strictly inside `(low, high)` (the
            reference's form).
        key (`str`, *optional*, defaults to `"overall"`):
            Reward key filtered on (`"overall"`, `"accuracy"`, `"format"`, ...).
        low (`float`, *optional*, defaults to `0.01`):
            Lower end of the open interval of the `"mean"` criterion.
        high (`float`, *optional*, defaults to `0.99`):
            Upper end of the open interval of the `"mean"` criterion.
        max_tries (`int`, *optional*, defaults to `20`):
            Generation rounds per training batch; `<= 0` means unlimited.
    """

    enable: bool = False
    criterion: str = "std"
    key: str = "overall"
    low: float = 0.01
    high: float = 0.99
    max_tries: int = 20

    def __post_init__(self) -> None:
        _named("algorithm.online_filtering.criterion", FILTERS.canonical, self.criterion)
        _check(
            self.low < self.high,
            f"algorithm.online_filtering.low ({self.low}) must be < high ({self.high})",
        )
        _check(bool(self.key), "algorithm.online_filtering.key must be a reward key")


@dataclass
class OverlongConfig:
    """DAPO soft overlong punishment, added to the scores (`filtering.overlong_penalty`).

    Parameters:
        enable (`bool`, *optional*, defaults to `False`):
            Apply the penalty.
        buffer (`int`, *optional*, defaults to `512`):
            Tokens before `max_length` where the penalty ramps from 0 to `-factor`.
        max_length (`int` or `None`, *optional*, defaults to `None`):
            Length (tokens) of full punishment; `None` means the data's max response length.
        factor (`float`, *optional*, defaults to `1.0`):
            Penalty at `max_length` (DAPO uses 1.0 with 0/1 accuracy rewards).
    """

    enable: bool = False
    buffer: int = 512
    max_length: int | None = None
    factor: float = 1.0

    def __post_init__(self) -> None:
        positive("algorithm.overlong.buffer", self.buffer)
        non_negative("algorithm.overlong.factor", self.factor)
        _check(
            self.max_length is None or self.max_length >= self.buffer,
            f"algorithm.overlong.max_length ({self.max_length}) must be >= buffer ({self.buffer})",
        )


@dataclass
class AlgorithmConfig:
    """Advantage estimator, policy loss, loss aggregation, KL, dynamic sampling and overlong shaping.

    Parameters:
        adv_estimator (`str`, *optional*, defaults to `"grpo"`):
            Registered estimator: `grpo`, `dr_grpo`, `rloo`, `reinforce_plus_plus`,
            `reinforce_plus_plus_baseline`, `remax`, `gdpo`, `grpo_passk`, `opo`, `gpg` or your own
            (`@register_advantage`); each one's docstring in `algorithms/advantages.py` names its paper.
        norm_adv_by_std (`bool`, *optional*, defaults to `True`):
            GRPO divides by the group std; `False` is Dr.GRPO's unnormalised `s - mean`.
        adv_std_unbiased (`bool`, *optional*, defaults to `False`):
            Group std with Bessel's correction (the reference, torch.std) or, by default, the
            population std, which gives every group unit-RMS advantages for any `n` (a [0, 1] pair
            gets +-1, not +-0.71). GDPO, GRPO pass@k and the REINFORCE++ whitening (batch variance)
            use the same choice (`true` there matches veRL's `masked_whiten`).
        adv_std_scope (`str`, *optional*, defaults to `"group"`):
            Whose std GRPO divides by: the group's, or `batch`, every score of the step's batch
            (TRL's `scale_rewards="batch"`).
        adv_eps (`float`, *optional*, defaults to `1e-6`):
            Added to the group std. It does not stop near-equal continuous rewards (0.500 vs 0.501)
            from being blown up to +-1: prefer Dr.GRPO for such rewards. All-equal groups are 0 exactly.
        gamma (`float`, *optional*, defaults to `1.0`):
            Discount of REINFORCE++ returns.
        whiten_eps (`float`, *optional*, defaults to `1e-8`):
            Added to the variance in batch whitening (REINFORCE++, GDPO).
        gdpo_reward_keys (`list[str]`, *optional*, defaults to `["accuracy", "format"]`):
            Reward keys GDPO normalises separately; missing keys are errors.
        policy_loss (`str`, *optional*, defaults to `"ppo"`):
            Registered loss: `ppo` (alias `vanilla`), `gspo`, `gspo_token`, `cispo`, `sapo`,
            `geo_mean` (GMPO), `clip_cov`, `kl_cov`, `dppo` or your own; each one's docstring in
            `algorithms/policy_losses.py` names its paper. `sapo` and `geo_mean` average per
            sequence, so they need `loss_agg_mode=seq-mean-token-mean`.
        loss_options (`dict`, *optional*, defaults to `{}`):
            The policy loss's own options (`algorithm.loss_options.clip_ratio_low=0.1`), each
            declared by the loss beside it (`algorithms/loss_options.py`; a plug-in loss's with
            `@register_policy_loss(name, options=...)` or its keyword-only defaults). An option no
            registered loss declares is an error; another loss's option does nothing. The flat
            keys of before (`algorithm.clip_ratio_low`, ...) still work, with a deprecation
            message naming the new key.
        loss_agg_mode (`str`, *optional*, defaults to `"token-mean"`):
            `token-mean`, `token-sum`, `seq-mean-token-mean`, `seq-mean-token-sum`,
            `seq-mean-token-sum-norm` (see `algorithms/aggregation.py`); always weighted over the
            whole mini-batch.
        loss_norm_length (`int` or `None`, *optional*, defaults to `None`):
            Constant divisor of `seq-mean-token-sum-norm`; `None` means the max response length.
        rollout_correction (`str`, *optional*, defaults to `"none"`):
            Importance weights `pi_old / pi_rollout` from the engine's log-probs of the sampled
            tokens (`algorithms/rollout_correction.py`): `tis` truncates them at the cap, `mis`
            drops tokens (or sequences) whose ratio leaves `[lower, cap]`; `none` trains as sampled.
            Corrects the engine's numerics (vLLM kernels, bf16) and, asynchronously, stale weights.
            Per-token losses are multiplied by the weights; `geo_mean` (GMPO), whose ratio is one per
            sequence, takes the geometric mean of its tokens' weights instead (as veRL does).
        rollout_correction_level (`str`, *optional*, defaults to `"token"`):
            `token` (each token's ratio) or `sequence` (the product over the sequence).
        rollout_correction_cap (`float`, *optional*, defaults to `2.0`):
            Upper bound of the weights (`tis`) or of the band (`mis`); must be > 1.
        rollout_correction_lower (`float` or `None`, *optional*, defaults to `None`):
            Lower bound of `mis`'s band, in (0, 1); `None` means `1 / rollout_correction_cap`.
        plugin_files (`list[str]`, *optional*, defaults to `[]`):
            Python files imported before the names above are checked, so that their
            `@register_advantage` / `@register_policy_loss` / `@register_kl_estimator` functions can
            be selected by name (like `reward.task_files` for reward tasks). `load_config` imports
            them before building any section (the `kl` section is built first).
        kl (`KLConfig`): KL regularisation.
        online_filtering (`OnlineFilterConfig`): DAPO dynamic sampling.
        overlong (`OverlongConfig`): DAPO overlong reward shaping.
        distill (`DistillConfig`): learning from a teacher on the policy's rollouts (OPD, RLSD).
    """

    adv_estimator: str = "grpo"
    norm_adv_by_std: bool = True
    adv_std_unbiased: bool = False
    adv_std_scope: str = "group"
    adv_eps: float = 1e-6
    gamma: float = 1.0
    whiten_eps: float = 1e-8
    gdpo_reward_keys: list[str] = field(default_factory=lambda: ["accuracy", "format"])
    policy_loss: str = "ppo"
    loss_options: dict[str, Any] = field(default_factory=dict)
    loss_agg_mode: str = "token-mean"
    loss_norm_length: int | None = None
    rollout_correction: str = "none"
    rollout_correction_level: str = "token"
    rollout_correction_cap: float = 2.0
    rollout_correction_lower: float | None = None
    plugin_files: list[str] = field(default_factory=list)
    kl: KLConfig = field(default_factory=KLConfig)
    online_filtering: OnlineFilterConfig = field(default_factory=OnlineFilterConfig)
    overlong: OverlongConfig = field(default_factory=OverlongConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)

    def __post_init__(self) -> None:
        load_plugin_files(self.plugin_files)  # before any name is looked up
        _named("algorithm.adv_estimator", ADVANTAGE_ESTIMATORS.canonical, self.adv_estimator)
        _named("algorithm.policy_loss", POLICY_LOSSES.canonical, self.policy_loss)
        self.loss_agg_mode = _named(
            "algorithm.loss_agg_mode", LOSS_AGGREGATIONS.canonical, self.loss_agg_mode
        )
        positive("algorithm.adv_eps", self.adv_eps)
        _check(
            self.adv_std_scope in ("group", "batch"),
            f"algorithm.adv_std_scope must be group or batch, got {self.adv_std_scope!r}",
        )
        positive("algorithm.whiten_eps", self.whiten_eps)
        in_range("algorithm.gamma", self.gamma, 0.0, 1.0)
        self.loss_settings()  # every registered loss checks the options it declares
        per_sequence = POLICY_LOSSES.canonical(self.policy_loss) in ("sapo", "geo_mean")
        _check(
            not per_sequence or self.loss_agg_mode == "seq-mean-token-mean",
            f"algorithm.policy_loss={self.policy_loss} averages per sequence: set "
            f"algorithm.loss_agg_mode=seq-mean-token-mean (got {self.loss_agg_mode})",
        )
        _check(
            self.loss_norm_length is None or self.loss_norm_length > 0,
            f"algorithm.loss_norm_length must be positive, got {self.loss_norm_length}",
        )
        _check(
            self.rollout_correction in ROLLOUT_CORRECTIONS,
            f"algorithm.rollout_correction must be one of {', '.join(ROLLOUT_CORRECTIONS)}, "
            f"got {self.rollout_correction!r}",
        )
        _check(
            self.rollout_correction_level in CORRECTION_LEVELS,
            f"algorithm.rollout_correction_level must be one of {', '.join(CORRECTION_LEVELS)}, "
            f"got {self.rollout_correction_level!r}",
        )
        _check(
            self.rollout_correction_cap > 1.0,
            f"algorithm.rollout_correction_cap must be > 1 (a weight cap at or below 1 only shrinks "
            f"the loss), got {self.rollout_correction_cap}",
        )
        _check(
            self.rollout_correction_lower is None or 0.0 < self.rollout_correction_lower < 1.0,
            f"algorithm.rollout_correction_lower must be in (0, 1) or None, got {self.rollout_correction_lower}",
        )
        _check(
            not (self.distill.sync_steps and self.kl.enabled),
            f"algorithm.distill.sync_steps={self.distill.sync_steps} moves the reference, which "
            f"algorithm.kl (type {self.kl.type}) also holds the policy to: use one of the two",
        )
        _check(
            ADVANTAGE_ESTIMATORS.canonical(self.adv_estimator) != "gdpo" or len(self.gdpo_reward_keys) > 0,
            "algorithm.adv_estimator=gdpo needs at least one key in algorithm.gdpo_reward_keys",
        )

    def advantage_options(self) -> dict[str, Any]:
        """Options for `compute_advantages` (each estimator takes the ones it declares)."""
        return {
            "norm_by_std": self.norm_adv_by_std,
            "std_unbiased": self.adv_std_unbiased,
            "eps": self.adv_eps,
            "std_scope": self.adv_std_scope,
            "gamma": self.gamma,
            "whiten_eps": self.whiten_eps,
            "reward_keys": list(self.gdpo_reward_keys),
        }

    def loss_settings(self) -> Any:
        """The selected policy loss's options dataclass, built from `loss_options`.

        Every registered loss's options are built from the keys it declares (so a bad value is
        refused whichever loss is selected, as a typo is); a key no loss declares is an error."""
        selected, unknown = build_options(
            POLICY_LOSSES.names(),
            policy_loss_options,
            dict(self.loss_options),
            POLICY_LOSSES.canonical(self.policy_loss),
        )
        own = ", ".join(f.name for f in dataclasses.fields(selected)) or "none"
        _check(
            not unknown,
            f"algorithm.loss_options.{unknown[0] if unknown else ''}: no registered policy loss takes "
            f"this option (algorithm.policy_loss={self.policy_loss} takes: {own})",
        )
        return selected

    def policy_loss_options(self) -> dict[str, Any]:
        """The keyword options of `compute_policy_loss` (the selected loss's, see `loss_settings`)."""
        return loss_arguments(self.loss_settings())

    def make_kl_controller(self) -> FixedKLController | AdaptiveKLController:
        """The KL coefficient controller described by `kl`."""
        from .kl import AdaptiveKLController, FixedKLController

        if self.kl.controller == "adaptive":
            return AdaptiveKLController(self.kl.coef, self.kl.target, self.kl.horizon)
        return FixedKLController(self.kl.coef)


def _named(key: str, lookup, name: str) -> str:
    """Look ``name`` up in a registry (its canonical name); an unknown name's error says which
    setting held it."""
    try:
        return lookup(name)
    except UnknownAlgorithmError as e:
        raise UnknownAlgorithmError(f"{key}: {e}") from None


def _check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)
