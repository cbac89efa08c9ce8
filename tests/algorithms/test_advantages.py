"""Advantage estimators against hand-computed values (expected numbers written out literally)."""

from __future__ import annotations

import pytest
import torch

from easyvideor1.algorithms import compute_advantages
from easyvideor1.algorithms.advantages import (
    discounted_returns,
    dr_grpo,
    gdpo,
    grpo,
    reinforce_plus_plus,
    remax,
    rloo,
)

ONE_CORRECT = torch.tensor(
    [0.0] * 7 + [1.0]
)  # the reference's mix-policy example: 7 online wrong, offline right


def ones(b: int, t: int = 1) -> torch.Tensor:
    return torch.ones(b, t)


def per_seq(adv: torch.Tensor) -> list[float]:
    return adv[:, 0].tolist()


def test_grpo_reference_example_unbiased_std() -> None:
    # mean 0.125, Bessel std sqrt(0.875 / 7) = 0.3535534 -> +0.875/0.3535544 and -0.125/0.3535544
    out = grpo(ONE_CORRECT, ones(8, 3), torch.zeros(8, dtype=torch.long), std_unbiased=True)
    assert per_seq(out.advantages)[7] == pytest.approx(2.474867, abs=1e-5)
    assert per_seq(out.advantages)[:7] == pytest.approx([-0.353552] * 7, abs=1e-5)
    assert torch.equal(out.advantages[:, 0:1].expand(8, 3), out.advantages)  # broadcast over tokens


def test_grpo_default_population_std() -> None:
    # population std sqrt(0.875 / 8) = 0.3307189: advantages sqrt(7) = 2.6457513 and -1/sqrt(7) = -0.3779645
    out = grpo(ONE_CORRECT, ones(8), torch.zeros(8, dtype=torch.long))
    assert per_seq(out.advantages) == pytest.approx([-0.3779645] * 7 + [2.6457513], abs=1e-5)
    # a [0, 1] pair gets +-1 (the unbiased std would give +-0.7071)
    pair = grpo(torch.tensor([0.0, 1.0]), ones(2), [5, 5]).advantages
    assert per_seq(pair) == pytest.approx([-0.999998, 0.999998], abs=1e-6)
    pair_unbiased = grpo(torch.tensor([0.0, 1.0]), ones(2), [5, 5], std_unbiased=True).advantages
    assert per_seq(pair_unbiased) == pytest.approx([-0.7071058, 0.7071058], abs=1e-6)


def test_grpo_groups_are_independent_and_masked() -> None:
    scores = torch.tensor([3.0, 0.0, 1.0, 2.0])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0], [1, 1, 0]])
    ids = torch.tensor([7, 42, 7, 42])  # non-contiguous, unsorted ids: groups {0, 2} and {1, 3}
    adv = grpo(scores, mask, ids, eps=0.0).advantages
    # group 7: [3, 1] -> mean 2, pop std 1 -> [+1, -1]; group 42: [0, 2] -> [-1, +1]
    expected = torch.tensor([[1.0, 1.0, 0.0], [-1.0, -1.0, -1.0], [-1.0, 0.0, 0.0], [1.0, 1.0, 0.0]])
    assert torch.allclose(adv, expected)
    assert (adv[mask == 0] == 0).all()


def test_singleton_and_uniform_groups_give_exact_zero() -> None:
    scores = torch.tensor([0.7, 0.1, 0.1, 0.1, 0.3, 1.0])
    ids = ["solo", "u", "u", "u", "mixed", "mixed"]  # uid strings work too
    for estimator in (grpo, dr_grpo, rloo):
        adv = estimator(scores, ones(6, 2), ids).advantages
        assert not torch.isnan(adv).any()
        assert (adv[:4] == 0).all(), estimator.__name__  # exact, not approximately
        assert (adv[4] < 0).all() and (adv[5] > 0).all()


def test_dr_grpo_has_no_std_division() -> None:
    adv = dr_grpo(torch.tensor([1.0, 0.0, 0.0, 1.0, 4.0, 2.0]), ones(6), [0, 0, 0, 0, 1, 1]).advantages
    assert per_seq(adv) == pytest.approx([0.5, -0.5, -0.5, 0.5, 1.0, -1.0])
    same = grpo(torch.tensor([1.0, 0.0, 0.0, 1.0, 4.0, 2.0]), ones(6), [0, 0, 0, 0, 1, 1], norm_by_std=False)
    assert torch.equal(adv, same.advantages)


def test_rloo_leave_one_out_baseline() -> None:
    # group [1, 0, 0]: 1 - (0+0)/2 = 1, 0 - (1+0)/2 = -0.5; group [2, 4]: -2, +2
    adv = rloo(torch.tensor([1.0, 0.0, 0.0, 2.0, 4.0]), ones(5), [0, 0, 0, 1, 1]).advantages
    assert per_seq(adv) == pytest.approx([1.0, -0.5, -0.5, -2.0, 2.0])


def test_token_level_scores_are_summed() -> None:
    token_rewards = torch.tensor([[0.0, 0.0, 1.0], [0.5, 0.5, 9.0]])  # 9.0 is padding
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    out = dr_grpo(token_rewards, mask, [0, 0])
    # sequence scores 1.0 and 1.0 -> a uniform group
    assert (out.advantages == 0).all()
    assert torch.allclose(out.returns, torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]))


def test_reinforce_plus_plus_discount_and_whitening() -> None:
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    out = reinforce_plus_plus(torch.tensor([1.0, 2.0]), mask, gamma=0.5)
    # token rewards [[0,0,1],[0,2,0]] -> returns [[.25,.5,1],[1,2,0]]; valid mean .95, pop std .6
    assert torch.allclose(out.returns, torch.tensor([[0.25, 0.5, 1.0], [1.0, 2.0, 0.0]]))
    expected = torch.tensor([[-1.1666667, -0.75, 0.0833333], [0.0833333, 1.75, 0.0]])
    assert torch.allclose(out.advantages, expected, atol=1e-5)


def test_discounted_returns_carry_across_masked_tool_spans() -> None:
    # an episode: policy turn (3 tokens), tool result (2 masked tokens), final turn (2 tokens, the
    # outcome reward 2 on its last), right padding. A masked token's reward (5: never placed there
    # by the estimators, here to show it) is not counted and does not discount.
    rewards = torch.tensor([[0.0, 0.0, 1.0, 5.0, 5.0, 0.0, 2.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0, 0, 1, 1, 0]])
    # gamma 1: every policy token's return is the sum of the rewards at it and after it
    assert discounted_returns(rewards, mask, 1.0).tolist() == [[3.0, 3.0, 3.0, 0.0, 0.0, 2.0, 2.0, 0.0]]
    # gamma 0.5, by hand over the policy tokens only: G6 = 2, G5 = 1, G2 = 1 + 0.5, G1 = 0.75, G0 = 0.375
    assert discounted_returns(rewards, mask, 0.5).tolist() == [[0.375, 0.75, 1.5, 0.0, 0.0, 1.0, 2.0, 0.0]]
    # REINFORCE++ on the episode: the first turn gets a return (before: 0, restarted at the span)
    episode_mask = mask.clone()
    out = reinforce_plus_plus(
        torch.tensor([2.0, 0.0]), torch.cat([episode_mask, torch.tensor([[1] * 8])]), gamma=1.0
    )
    assert out.returns[0].tolist() == [2.0, 2.0, 2.0, 0.0, 0.0, 2.0, 2.0, 0.0]


def test_remax_subtracts_greedy_baseline() -> None:
    scores, mask, ids = torch.tensor([1.0, 0.0, 1.0]), torch.tensor([[1, 1], [1, 0], [1, 1]]), [0, 0, 1]
    by_group = remax(scores, mask, ids, baseline_scores={0: 0.5, 1: 1.0})
    assert torch.allclose(by_group.advantages, torch.tensor([[0.5, 0.5], [-0.5, 0.0], [0.0, 0.0]]))
    per_row = remax(scores, mask, ids, baseline_scores=torch.tensor([0.5, 0.5, 1.0]))
    assert torch.equal(by_group.advantages, per_row.advantages)
    with pytest.raises(ValueError, match="differ within a group"):
        remax(scores, mask, ids, baseline_scores=torch.tensor([0.5, 0.4, 1.0]))
    with pytest.raises(KeyError, match="1"):
        remax(scores, mask, ids, baseline_scores={0: 0.5})


def test_gdpo_normalises_keys_separately_then_whitens_tokens() -> None:
    scores = {"accuracy": torch.tensor([1.0, 0.0, 1.0, 1.0]), "format": torch.tensor([1.0, 1.0, 0.0, 1.0])}
    mask = torch.tensor([[1, 0], [1, 1], [1, 0], [1, 0]])
    out = gdpo(scores, mask, [0, 0, 1, 1])
    # per key: accuracy -> [+1, -1, 0, 0], format -> [0, 0, -1, +1]; sum [+1, -1, -1, +1].
    # tokens [+1, -1, -1, -1, +1]: mean -0.2, pop var 0.96 -> +1.2/sqrt(.96), -0.8/sqrt(.96)
    hi, lo = 1.2247449, -0.8164966
    assert torch.allclose(
        out.advantages, torch.tensor([[hi, 0.0], [lo, lo], [lo, 0.0], [hi, 0.0]]), atol=1e-5
    )
    assert torch.allclose(out.returns, torch.tensor([[2.0, 0.0], [1.0, 1.0], [1.0, 0.0], [2.0, 0.0]]))


def test_gdpo_missing_key_and_uncentered_mode() -> None:
    with pytest.raises(KeyError, match="format"):
        gdpo({"accuracy": torch.ones(2)}, ones(2), [0, 0])
    with pytest.raises(KeyError, match="format"):
        gdpo({"accuracy": torch.ones(2), "format": None}, ones(2), [0, 0])  # type: ignore[dict-item]
    with pytest.raises(TypeError, match="mapping"):
        gdpo(torch.ones(2), ones(2), [0, 0])  # type: ignore[arg-type]
    scores = {"accuracy": torch.tensor([1.0, 0.0, 1.0, 1.0])}
    adv = gdpo(
        scores, torch.tensor([[1, 1], [1, 0], [1, 0], [1, 0]]), [0, 0, 1, 1], reward_keys=None, center=False
    )
    assert (adv.advantages[2:] == 0).all()  # the uniform group stays exactly 0 without centering


def test_validation_errors() -> None:
    with pytest.raises(ValueError, match="NaN"):
        grpo(torch.tensor([0.0, float("nan")]), ones(2), [0, 0])
    with pytest.raises(ValueError, match="scores must be"):
        grpo(torch.zeros(3), ones(2), [0, 0])
    with pytest.raises(ValueError, match="group_ids"):
        grpo(torch.zeros(2), ones(2), [0, 0, 1])
    with pytest.raises(TypeError, match="gdpo"):
        grpo({"accuracy": torch.zeros(2)}, ones(2), [0, 0])  # type: ignore[arg-type]


def test_dispatch_by_name_ignores_options_an_estimator_does_not_take() -> None:
    options = {"norm_by_std": False, "gamma": 0.9, "eps": 1e-6, "reward_keys": ["accuracy"]}
    by_name = compute_advantages("dr-grpo", torch.tensor([1.0, 0.0]), ones(2), [0, 0], **options)
    assert per_seq(by_name.advantages) == [0.5, -0.5]
    grpo_out = compute_advantages("GRPO", torch.tensor([1.0, 0.0]), ones(2), [0, 0], **options)
    assert per_seq(grpo_out.advantages) == [0.5, -0.5]  # norm_by_std=False reached grpo


def test_dtype_follows_scores() -> None:
    assert grpo(torch.tensor([0.0, 1.0]), ones(2), [0, 0]).advantages.dtype == torch.float32
    assert (
        grpo(torch.tensor([0.0, 1.0], dtype=torch.float64), ones(2), [0, 0]).advantages.dtype == torch.float64
    )
    assert grpo(torch.tensor([0, 1]), ones(2), [0, 0]).advantages.dtype == torch.float32
