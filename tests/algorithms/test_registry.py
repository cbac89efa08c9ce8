"""Registries: user-registered estimators and losses are usable by name; unknown names fail clearly."""

from __future__ import annotations

import pytest
import torch

from easyvideor1.algorithms import (
    AdvantageOutput,
    AlgorithmConfig,
    PolicyLossOutput,
    UnknownAlgorithmError,
    compute_advantages,
    compute_policy_loss,
    get_advantage_estimator,
    get_policy_loss,
    list_advantage_estimators,
    list_policy_losses,
    register_advantage,
    register_policy_loss,
)
from easyvideor1.algorithms._registry import Registry


@register_advantage("test_best_of_group")
def best_of_group(scores, response_mask, group_ids, *, bonus: float = 1.0) -> AdvantageOutput:
    """A toy estimator: `bonus` for the best response of the batch, 0 otherwise."""
    adv = (scores == scores.max()).float() * bonus
    token = adv.unsqueeze(-1) * response_mask
    return AdvantageOutput(token, token)


@register_policy_loss("test_reinforce")
def plain_reinforce(log_prob, old_log_prob, advantages, response_mask) -> PolicyLossOutput:
    """A toy loss: vanilla REINFORCE, -A log p."""
    return PolicyLossOutput(-advantages * log_prob * response_mask, {})


def test_builtins_are_registered() -> None:
    assert {"grpo", "dr_grpo", "rloo", "reinforce_plus_plus", "remax", "gdpo"} <= set(
        list_advantage_estimators()
    )
    assert {"ppo", "gspo", "gspo_token", "cispo"} <= set(list_policy_losses())


def test_user_estimator_is_usable_by_name_and_in_the_config() -> None:
    out = compute_advantages(
        "test-best-of-group", torch.tensor([0.0, 2.0]), torch.ones(2, 2), [0, 0], bonus=3.0
    )
    assert out.advantages.tolist() == [[0.0, 0.0], [3.0, 3.0]]
    assert get_advantage_estimator("TEST_BEST_OF_GROUP") is best_of_group
    cfg = AlgorithmConfig(adv_estimator="test_best_of_group", policy_loss="test_reinforce")
    # the config's options (gamma, eps, ...) are passed along and ignored where not declared
    compute_advantages(cfg.adv_estimator, torch.zeros(2), torch.ones(2, 1), [0, 0], **cfg.advantage_options())


def test_user_loss_is_usable_by_name() -> None:
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    out = compute_policy_loss(
        "test_reinforce",
        logp,
        logp.detach(),
        torch.tensor([[2.0, 2.0]]),
        torch.ones(1, 2),
        clip_ratio_low=0.2,
    )
    assert out.loss.tolist() == [[2.0, 4.0]]
    assert get_policy_loss("test_reinforce") is plain_reinforce


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(
        UnknownAlgorithmError, match=r"unknown advantage estimator 'grop' \(did you mean 'grpo'"
    ) as e:
        get_advantage_estimator("grop")
    assert "rloo" in str(e.value) and "reinforce_plus_plus" in str(e.value)
    with pytest.raises(UnknownAlgorithmError, match="known: .*cispo.*gspo"):
        get_policy_loss("trpo")
    assert isinstance(UnknownAlgorithmError("x"), ValueError)


def test_name_clashes_need_override() -> None:
    registry: Registry = Registry("thing")

    @registry.register("alpha", aliases=("a",))
    def first() -> int:
        return 1

    registry.register("alpha")(first)  # the same function again (module re-import) is fine
    with pytest.raises(ValueError, match="already registered"):

        @registry.register("alpha")
        def second() -> int:
            return 2

    with pytest.raises(ValueError, match="'a' is already registered"):

        @registry.register("beta", aliases=("a",))
        def third() -> int:
            return 3

    @registry.register("alpha", override=True)
    def fourth() -> int:
        return 4

    assert registry.get("alpha")() == 4 and registry.get("A")() == 4  # the alias follows the override
    assert "alpha" in registry and "gamma" not in registry and registry.names() == ["alpha"]
