"""The estimators and modes added after the differential run against veRL and TRL, each against a
hand computation: REINFORCE++-baseline, GRPO pass@k, OPO, GPG, GRPO with the batch std, and the
token-sum aggregation."""

from __future__ import annotations

import math

import pytest
import torch

from easyvideor1.algorithms import get_advantage_estimator
from easyvideor1.algorithms.advantages import compute_advantages
from easyvideor1.algorithms.aggregation import GlobalBatchStats, aggregate_loss
from easyvideor1.algorithms.config import AlgorithmConfig

# two groups of three, one group of one; responses of 3, 2, 3 | 3, 1, 3 | 2 valid tokens
SCORES = [1.0, 0.0, 1.0, 0.0, 0.0, 0.5, 0.7]
GROUPS = [0, 0, 0, 1, 1, 1, 2]
LENGTHS = [3, 2, 3, 3, 1, 3, 2]


def _mask() -> torch.Tensor:
    mask = torch.zeros(len(LENGTHS), 3)
    for i, n in enumerate(LENGTHS):
        mask[i, :n] = 1
    return mask


def _rows(name: str, **options) -> list[float]:
    """Each sequence's advantage (its first token), after checking it is on every valid token only."""
    mask = _mask()
    adv = compute_advantages(name, torch.tensor(SCORES), mask, GROUPS, **options).advantages
    assert torch.all(adv[mask == 0] == 0)
    return [float(adv[i, 0]) for i in range(len(SCORES))]


def _members(g: int) -> list[int]:
    return [i for i, x in enumerate(GROUPS) if x == g]


def test_reinforce_plus_plus_baseline_subtracts_the_group_mean_then_whitens_over_tokens():
    centered = []
    for i, s in enumerate(SCORES):
        group = _members(GROUPS[i])
        mean = sum(SCORES[j] for j in group) / len(group) if len(group) > 1 else 0.0  # alone: no baseline
        centered += [s - mean] * LENGTHS[i]
    mu = sum(centered) / len(centered)
    var = sum((c - mu) ** 2 for c in centered) / len(centered)
    expected = []
    for i, s in enumerate(SCORES):
        group = _members(GROUPS[i])
        mean = sum(SCORES[j] for j in group) / len(group) if len(group) > 1 else 0.0
        expected.append((s - mean - mu) / math.sqrt(var + 1e-8))
    assert _rows("reinforce_plus_plus_baseline") == pytest.approx(expected, abs=1e-6)


def test_grpo_passk_rewards_only_the_best_response_by_its_margin():
    scores = [0.2, 0.9, 0.5, 1.0, 1.0, 0.0]  # group 0: a clear best; group 1: a tie at the top
    mask = torch.ones(6, 2)
    adv = compute_advantages("grpo_passk", torch.tensor(scores), mask, [0, 0, 0, 1, 1, 1]).advantages[:, 0]
    g0 = scores[:3]
    mean = sum(g0) / 3
    std = math.sqrt(sum((x - mean) ** 2 for x in g0) / 3)
    assert adv.tolist() == pytest.approx([0.0, (0.9 - 0.5) / (std + 1e-6), 0.0, 0.0, 0.0, 0.0], abs=1e-6)
    raw = compute_advantages("grpo_passk", torch.tensor(scores), mask, [0, 0, 0, 1, 1, 1], norm_by_std=False)
    assert raw.advantages[1, 0] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="at least 2 responses per group"):
        compute_advantages("grpo_passk", torch.tensor([1.0]), torch.ones(1, 1), [0])


def test_opo_uses_the_length_weighted_group_baseline():
    expected = []
    for i, s in enumerate(SCORES):
        group = _members(GROUPS[i])
        if len(group) > 1:
            base = sum(LENGTHS[j] * SCORES[j] for j in group) / sum(LENGTHS[j] for j in group)
        else:
            base = 0.0
        expected.append(s - base)
    assert _rows("opo") == pytest.approx(expected, abs=1e-6)


def test_gpg_scales_the_centred_score_by_batch_over_scoring_responses():
    alpha = len(SCORES) / sum(1 for s in SCORES if s != 0)  # 7 / 4
    expected = []
    for i, s in enumerate(SCORES):
        group = _members(GROUPS[i])
        mean = sum(SCORES[j] for j in group) / len(group) if len(group) > 1 else 0.0
        expected.append(alpha * (s - mean))
    assert _rows("gpg") == pytest.approx(expected, abs=1e-6)
    assert _rows("gpg", f_norm=2.0) == pytest.approx([e / 2 for e in expected], abs=1e-6)


def test_grpo_with_the_batch_std_divides_by_the_std_of_every_score():
    mean_all = sum(SCORES) / len(SCORES)
    for unbiased in (False, True):
        n = len(SCORES) - (1 if unbiased else 0)
        std = math.sqrt(sum((s - mean_all) ** 2 for s in SCORES) / n)
        expected = []
        for i, s in enumerate(SCORES):
            group = _members(GROUPS[i])
            mean = sum(SCORES[j] for j in group) / len(group)
            expected.append((s - mean) / (std + 1e-6))
        assert _rows("grpo", std_scope="batch", std_unbiased=unbiased) == pytest.approx(expected, abs=1e-6)
    assert AlgorithmConfig(adv_std_scope="batch").advantage_options()["std_scope"] == "batch"
    with pytest.raises(ValueError, match="algorithm.adv_std_scope"):
        AlgorithmConfig(adv_std_scope="token")


def test_token_sum_adds_every_valid_token_of_the_global_batch():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    stats = GlobalBatchStats(num_tokens=10, num_sequences=5, dp_size=2)  # this rank: 3 of the 10
    # FSDP averages over the 2 ranks, so each rank's share is its sum times 2
    assert float(aggregate_loss(loss, mask, "token-sum", global_stats=stats)) == pytest.approx(
        2 * (1 + 2 + 4)
    )
    assert AlgorithmConfig(loss_agg_mode="token-sum").loss_agg_mode == "token-sum"


@pytest.mark.parametrize("name", ["reinforce_plus_plus_baseline", "grpo_passk", "opo", "gpg"])
def test_each_new_estimator_is_registered_with_its_paper(name):
    doc = get_advantage_estimator(name).__doc__ or ""
    assert "arXiv:" in doc


def test_gspo_has_no_dual_clip_unless_set_and_clamps_its_log_ratio_at_10():
    from easyvideor1.algorithms.policy_losses import gspo, gspo_token, ppo

    # a negative advantage and a sequence ratio of e^2 ~ 7.39: PPO's dual clip (3) would cap the loss
    logp, old = torch.tensor([[0.0, 0.0]]), torch.tensor([[-2.0, -2.0]])
    adv, mask = torch.full((1, 2), -1.0), torch.ones(1, 2)
    for loss_fn in (gspo, gspo_token):
        assert loss_fn(logp, old, adv, mask).loss[0, 0].item() == pytest.approx(math.exp(2.0), rel=1e-6)
        assert loss_fn(logp, old, adv, mask, clip_ratio_dual=3.0).loss[0, 0].item() == pytest.approx(3.0)
    assert ppo(logp, old, adv, mask).loss[0, 0].item() == pytest.approx(3.0)  # the token loss keeps it
    # a sequence log-ratio of 15 counts as 10 (veRL's clamp)
    huge = gspo(torch.zeros(1, 2), torch.full((1, 2), -15.0), adv, mask).loss[0, 0].item()
    assert huge == pytest.approx(math.exp(10.0), rel=1e-6)
    # the config passes the GSPO bound to the GSPO losses only
    assert AlgorithmConfig(policy_loss="gspo").policy_loss_options()["clip_ratio_dual"] is None
    assert (
        AlgorithmConfig(policy_loss="gspo", gspo_clip_ratio_dual=4.0).policy_loss_options()["clip_ratio_dual"]
        == 4.0
    )
    assert AlgorithmConfig(policy_loss="ppo").policy_loss_options()["clip_ratio_dual"] == 3.0
    with pytest.raises(ValueError, match="algorithm.gspo_clip_ratio_dual"):
        AlgorithmConfig(gspo_clip_ratio_dual=0.5)
