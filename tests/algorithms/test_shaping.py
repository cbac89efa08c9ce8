"""Reward shaping between scoring and the estimator: one overlong penalty, the KL penalty in the reward."""

from __future__ import annotations

import pytest
import torch

from easyvideor1.algorithms import (
    AlgorithmConfig,
    KLConfig,
    OverlongConfig,
    compute_advantages,
    kl_penalty,
    overlong_penalty,
    shape_rewards,
)

MASK = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0], [1, 1, 1, 1, 0]])
SCORES = torch.tensor([1.0, 0.0, 1.0, 0.5])


def test_nothing_on_leaves_the_scores_as_they_are() -> None:
    out = shape_rewards(SCORES, MASK, AlgorithmConfig(), max_response_length=5)
    assert torch.equal(out.rewards, SCORES) and out.metrics == {}
    assert out.rewards is not SCORES  # a copy: the experience's scores stay the raw ones


def test_overlong_penalty_uses_the_response_limit_when_max_length_is_unset() -> None:
    alg = AlgorithmConfig(overlong=OverlongConfig(enable=True, buffer=2))
    out = shape_rewards(SCORES, MASK, alg, max_response_length=5)
    pen = overlong_penalty(MASK, max_length=5, buffer=2)
    assert pen.tolist() == [0.0, -1.0, 0.0, -0.5]  # free up to 3 tokens, -1 at 5
    assert torch.equal(out.rewards, SCORES + pen)
    assert out.metrics["reward/overlong_penalty"] == pytest.approx(float(pen.mean()))


def test_kl_in_the_reward_gives_token_rewards_whose_sum_is_the_penalised_score() -> None:
    torch.manual_seed(0)
    logp, ref = -torch.rand(4, 5), -torch.rand(4, 5)
    alg = AlgorithmConfig(kl=KLConfig(type="k3", apply_as="reward"))
    out = shape_rewards(
        SCORES, MASK, alg, max_response_length=5, kl_coef=0.1, log_prob=logp, ref_log_prob=ref
    )
    kl = kl_penalty(logp, ref, "k3", MASK)
    assert out.rewards.shape == (4, 5)
    assert torch.allclose(out.rewards.sum(1), SCORES - 0.1 * kl.sum(1))
    assert torch.all(out.rewards[MASK == 0] == 0)
    assert out.metrics["actor/reward_kl"] == pytest.approx(float(kl.sum() / MASK.sum()))
    # group estimators see the sequence sums: the same advantages as penalised [B] scores
    token = compute_advantages("grpo", out.rewards, MASK, [0, 0, 1, 1]).advantages
    seq = compute_advantages("grpo", SCORES - 0.1 * kl.sum(1), MASK, [0, 0, 1, 1]).advantages
    assert torch.allclose(token, seq, atol=1e-6)
    with pytest.raises(ValueError, match="log-probs"):
        shape_rewards(SCORES, MASK, alg, max_response_length=5, kl_coef=0.1)


def test_kl_as_a_loss_does_not_touch_the_rewards() -> None:
    alg = AlgorithmConfig(kl=KLConfig(type="k3", apply_as="loss"))
    logp = -torch.rand(4, 5)
    out = shape_rewards(
        SCORES, MASK, alg, max_response_length=5, kl_coef=0.1, log_prob=logp, ref_log_prob=logp
    )
    assert torch.equal(out.rewards, SCORES)
