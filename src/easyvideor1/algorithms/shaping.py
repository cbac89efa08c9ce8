"""Reward shaping between scoring and the advantage estimator: DAPO's overlong penalty and the KL
penalty in the reward.

The trainer's scores are the reward library's ``overall``; :func:`shape_rewards` applies, in order,

* the soft overlong punishment (``algorithm.overlong``; the only one: the reward library has none),
* the in-reward KL penalty (``algorithm.kl.apply_as=reward``) through
  :func:`~easyvideor1.algorithms.kl.kl_penalty_rewards`, which turns the ``[B]`` scores into ``[B, T]``
  token rewards (outcome on the last token minus ``coef * KL`` on every token).

Estimators that read the raw reward keys or a greedy baseline (``advantage_inputs``) refuse both at
config time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .kl import kl_penalty_rewards
from .masked import sequence_lengths


def overlong_penalty(
    lengths_or_mask: torch.Tensor, *, max_length: int, buffer: int, factor: float = 1.0
) -> torch.Tensor:
    """DAPO's soft overlong punishment per sequence, `[B]` float32, counted in tokens.

    0 while `length <= max_length - buffer`, then linear down to `-factor` at `length == max_length`
    (and `-factor` beyond). Add it to the scores before computing advantages. Accepts lengths `[B]`
    or a response mask `[B, T]`.
    """
    if not (0 < buffer <= max_length):
        raise ValueError(
            f"overlong penalty needs 0 < buffer <= max_length, got buffer={buffer}, max={max_length}"
        )
    lengths = sequence_lengths(lengths_or_mask) if lengths_or_mask.dim() == 2 else lengths_or_mask
    over = (lengths.to(torch.float64) - (max_length - buffer)).clamp(min=0.0)
    return (-factor * (over / buffer).clamp(max=1.0)).to(torch.float32)


@dataclass
class ShapedRewards:
    """What the advantage estimator receives.

    Attributes:
        rewards: `[B]` sequence scores, or `[B, T]` token rewards when the KL penalty is in the reward.
        metrics: `reward/overlong_penalty` and `actor/reward_kl` when those are on.
    """

    rewards: torch.Tensor
    metrics: dict[str, float] = field(default_factory=dict)


def shape_rewards(
    scores: torch.Tensor,
    response_mask: torch.Tensor,
    alg,
    *,
    max_response_length: int,
    kl_coef: float = 0.0,
    log_prob: torch.Tensor | None = None,
    ref_log_prob: torch.Tensor | None = None,
) -> ShapedRewards:
    """Shape one step's ``overall`` scores `[B]` as ``alg`` (an ``AlgorithmConfig``) says.

    ``max_response_length`` is the overlong penalty's full-punishment length when
    ``alg.overlong.max_length`` is unset; ``log_prob``/``ref_log_prob`` (`[B, T]`, the old and
    reference policies) and the controller's current ``kl_coef`` are needed for the KL-in-reward.
    """
    out = ShapedRewards(scores.clone())
    if alg.overlong.enable:
        pen = overlong_penalty(
            response_mask,
            max_length=alg.overlong.max_length or max_response_length,
            buffer=alg.overlong.buffer,
            factor=alg.overlong.factor,
        )
        out.rewards = out.rewards + pen
        out.metrics["reward/overlong_penalty"] = float(pen.mean())
    if alg.kl.enabled and alg.kl.apply_as == "reward":
        if log_prob is None or ref_log_prob is None:
            raise ValueError("algorithm.kl.apply_as=reward needs the old and reference log-probs")
        kl = kl_penalty_rewards(
            out.rewards, log_prob, ref_log_prob, response_mask, coef=kl_coef, kind=alg.kl.type
        )
        out.rewards = kl.token_rewards
        out.metrics["actor/reward_kl"] = float(kl.mean_kl)
    return out
