"""The options of the built-in policy losses, each loss's own settings declared beside it (torch-free).

A policy loss declares its options as a dataclass when it is registered
(`register_policy_loss(name, options=...)`; the built-ins in `_registry.py`): its fields are the
keyword options the loss function takes, with their defaults, and `__post_init__` checks them.
The user sets them under `algorithm.loss_options` (`algorithm.loss_options.clip_ratio_low=0.1`,
or a plug-in loss's `algorithm.loss_options.my_beta=2`); :class:`~.config.AlgorithmConfig` builds
the selected loss's dataclass from them, so the config lists no loss's options itself.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..validation import in_range, non_negative, one_of, positive, require

KEY = "algorithm.loss_options"  # where the options are set; error messages name `KEY.<option>`


@dataclass
class LossOptions:
    """The base of the built-in losses' options (a plug-in's options dataclass need not be one)."""

    def loss_arguments(self) -> dict[str, Any]:
        """The keyword options the loss function takes (the fields, unless a loss renames one)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


def loss_arguments(options: Any) -> dict[str, Any]:
    """What a loss's options dataclass hands the loss function."""
    if isinstance(options, LossOptions):
        return options.loss_arguments()
    return dataclasses.asdict(options)


@dataclass
class ClipRange(LossOptions):
    """The ratio clip of the clipped losses (`ppo`, `gspo`, `gspo_token`, `cispo`,
    `geo_mean`, `clip_cov`).

    Parameters:
        clip_ratio_low: Lower clip: the ratio is clipped to `[1 - clip_ratio_low, 1 + clip_ratio_high]`.
        clip_ratio_high: Upper clip; `clip_ratio_high > clip_ratio_low` is DAPO's clip-higher. With
            one update per rollout batch the ratio is 1 and clipping never binds (as in the
            reference's run).
    """

    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.28

    def __post_init__(self) -> None:
        in_range(f"{KEY}.clip_ratio_low", self.clip_ratio_low, 0.0, 1.0)
        require(self.clip_ratio_low < 1.0, f"{KEY}.clip_ratio_low", "must be < 1", self.clip_ratio_low)
        non_negative(f"{KEY}.clip_ratio_high", self.clip_ratio_high)


def _dual_clip(name: str, bound: float | None) -> None:
    require(bound is None or bound > 1.0, f"{KEY}.{name}", "must be > 1 or null", bound)


@dataclass
class PPOOptions(ClipRange):
    """`ppo`: the clip range and the dual clip.

    Parameters:
        clip_ratio_dual: Dual-clip bound `c > 1` for negative advantages of the token-level
            losses (`ppo`); `None` disables it.
    """

    clip_ratio_dual: float | None = 3.0

    def __post_init__(self) -> None:
        super().__post_init__()
        _dual_clip("clip_ratio_dual", self.clip_ratio_dual)


@dataclass
class GSPOOptions(ClipRange):
    """`gspo` / `gspo_token`: the clip range and their own dual clip.

    Parameters:
        gspo_clip_ratio_dual: Dual-clip bound of `gspo` / `gspo_token`: off unless set (neither
            the GSPO paper nor veRL dual-clips the sequence ratio).
    """

    gspo_clip_ratio_dual: float | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _dual_clip("gspo_clip_ratio_dual", self.gspo_clip_ratio_dual)

    def loss_arguments(self) -> dict[str, Any]:
        clip = {"clip_ratio_low": self.clip_ratio_low, "clip_ratio_high": self.clip_ratio_high}
        return {**clip, "clip_ratio_dual": self.gspo_clip_ratio_dual}


@dataclass
class SAPOOptions(LossOptions):
    """`sapo`: the gate temperatures.

    Parameters:
        sapo_tau_pos: SAPO's gate temperature for tokens with a positive advantage.
        sapo_tau_neg: SAPO's gate temperature for the other tokens (larger: their gradient fades sooner).
    """

    sapo_tau_pos: float = 1.0
    sapo_tau_neg: float = 1.05

    def __post_init__(self) -> None:
        positive(f"{KEY}.sapo_tau_pos", self.sapo_tau_pos)
        positive(f"{KEY}.sapo_tau_neg", self.sapo_tau_neg)


@dataclass
class ClipCovOptions(ClipRange):
    """`clip_cov`: the clip range and the covariance band whose tokens lose their gradient.

    Parameters:
        clip_cov_ratio: Clip-Cov: share of a micro-batch's tokens whose gradient is dropped.
        clip_cov_lb: Clip-Cov: those tokens are drawn among the ones whose covariance term exceeds this...
        clip_cov_ub: ...and stays below this.
    """

    clip_cov_ratio: float = 0.0002
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0

    def __post_init__(self) -> None:
        super().__post_init__()
        positive(f"{KEY}.clip_cov_ratio", self.clip_cov_ratio)
        require(
            self.clip_cov_lb < self.clip_cov_ub,
            f"{KEY}.clip_cov_lb",
            f"must be below {KEY}.clip_cov_ub ({self.clip_cov_ub})",
            self.clip_cov_lb,
        )


@dataclass
class KLCovOptions(LossOptions):
    """`kl_cov`: the share of tokens penalised and the penalty's weight.

    Parameters:
        kl_cov_ratio: KL-Cov: share of a micro-batch's tokens (the largest covariance terms) penalised.
        kl_cov_coef: KL-Cov: weight of the `|log ratio|` penalty on them.
    """

    kl_cov_ratio: float = 0.0002
    kl_cov_coef: float = 0.1

    def __post_init__(self) -> None:
        positive(f"{KEY}.kl_cov_ratio", self.kl_cov_ratio)
        non_negative(f"{KEY}.kl_cov_coef", self.kl_cov_coef)


DPPO_DIVERGENCES = ("binary_tv", "binary_kl")


@dataclass
class DPPOOptions(LossOptions):
    """`dppo`: the trust region's divergence and bounds.

    Parameters:
        dppo_divergence: DPPO's trust-region divergence at the sampled token: `binary_tv` or `binary_kl`.
        dppo_delta_low: DPPO: the divergence past which a token whose probability falls leaves the
            region (the paper: 0.15 for TV, 0.05 for KL).
        dppo_delta_high: DPPO: likewise for a token whose probability rises with a positive advantage.
        dppo_ratio_cap: DPPO: the detached importance ratio is capped at this.
    """

    dppo_divergence: str = "binary_tv"
    dppo_delta_low: float = 0.15
    dppo_delta_high: float = 0.15
    dppo_ratio_cap: float = 20.0

    def __post_init__(self) -> None:
        one_of(f"{KEY}.dppo_divergence", self.dppo_divergence, DPPO_DIVERGENCES)
        for name in ("dppo_delta_low", "dppo_delta_high", "dppo_ratio_cap"):
            positive(f"{KEY}.{name}", getattr(self, name))


# the built-in losses' options: once flat keys of the algorithm section (`algorithm.clip_ratio_low`),
# read as `algorithm.loss_options.<key>` with a deprecation message
BUILT_IN_LOSS_OPTION_KEYS = tuple(
    dict.fromkeys(
        f.name
        for options in (PPOOptions, GSPOOptions, SAPOOptions, ClipCovOptions, KLCovOptions, DPPOOptions)
        for f in dataclasses.fields(options)
    )
)
