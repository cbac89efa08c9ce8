"""KL estimators, the in-reward penalty, the loss term and the controllers, by hand."""

from __future__ import annotations

import math

import pytest
import torch

from easyvideor1.algorithms import (
    AdaptiveKLController,
    FixedKLController,
    UnknownAlgorithmError,
    aggregate_loss,
    kl_loss,
    kl_penalty,
    kl_penalty_rewards,
    list_kl_estimators,
)

LOGP = torch.tensor([[math.log(0.5), math.log(0.25)]], dtype=torch.float64)
REF = torch.tensor([[math.log(0.25), math.log(0.5)]], dtype=torch.float64)
LN2 = 0.6931472


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("none", [0.0, 0.0]),
        ("k1", [LN2, -LN2]),
        ("kl", [LN2, -LN2]),
        ("abs", [LN2, LN2]),
        ("k2", [0.2402265, 0.2402265]),  # 0.5 * ln(2)^2
        ("mse", [0.2402265, 0.2402265]),
        # x = ref - logp = [-ln2, ln2]: e^x - x - 1 = [0.5 + ln2 - 1, 2 - ln2 - 1]
        ("k3", [0.1931472, 0.3068528]),
        ("low_var_kl", [0.1931472, 0.3068528]),
    ],
)
def test_estimators_by_hand(kind: str, expected: list[float]) -> None:
    assert kl_penalty(LOGP, REF, kind).tolist()[0] == pytest.approx(expected, abs=1e-6)


def test_k3_clamps_and_gradient() -> None:
    # x = 2 -> e^2 - 3 = 4.3890561; x = 5 -> 142.4 -> capped at 10; x = 50 -> clamped to 20 -> 10
    logp = torch.tensor([[0.0, 0.0, 0.0, 0.0]], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[2.0, 5.0, 50.0, -1.0]], dtype=torch.float64)
    kl = kl_penalty(logp, ref, "k3")
    assert kl.tolist()[0] == pytest.approx([4.3890561, 10.0, 10.0, 0.3678794], abs=1e-6)
    kl.sum().backward()
    # d/dlogp (e^x - x - 1) = 1 - e^x, zero where the value is capped
    assert logp.grad.tolist()[0] == pytest.approx([1 - math.exp(2.0), 0.0, 0.0, 1 - math.exp(-1.0)])


def test_masked_positions_are_zero_without_nan_gradients() -> None:
    logp = torch.tensor([[-1.0, float("-inf")]], requires_grad=True)
    ref = torch.tensor([[-2.0, float("-inf")]])
    mask = torch.tensor([[1, 0]])
    for kind in list_kl_estimators():
        kl = kl_penalty(logp, ref, kind, mask)
        assert kl[0, 1].item() == 0.0
        if kind == "none":
            assert not kl.requires_grad
            continue
        kl.sum().backward()
        assert torch.isfinite(logp.grad).all(), kind
        logp.grad = None


def test_unknown_kind_lists_known() -> None:
    with pytest.raises(UnknownAlgorithmError, match="known: abs, k1, k2, k3, none"):
        kl_penalty(LOGP, REF, "full")


def test_in_reward_penalty_by_hand() -> None:
    logp = torch.tensor([[-1.0, -1.0, 0.0], [-0.5, 0.0, 0.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -0.5, 0.0], [-1.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    out = kl_penalty_rewards(torch.tensor([1.0, 0.0]), logp, ref, mask, coef=0.1, kind="k1")
    # k1 = logp - ref = [[.5, -.5, 0], [.5, 0, 0]]; score on the last valid token, minus 0.1 * k1
    assert torch.allclose(out.token_rewards, torch.tensor([[-0.05, 1.05, 0.0], [-0.05, 0.0, 0.0]]))
    assert out.mean_kl.item() == pytest.approx(0.5 / 3)  # (0.5 - 0.5 + 0.5) / 3 valid tokens
    assert not out.token_rewards.requires_grad


def test_kl_loss_is_aggregated_like_the_policy_loss() -> None:
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    logp = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
    ref = torch.tensor([[-1.5, -1.0, 0.0], [-1.0, 0.0, 0.0]])
    # k2 per token [[.125, .5, 0], [.125, 0, 0]]: token-mean .75/3 = .25; seq-mean-token-mean (.3125 + .125)/2
    assert kl_loss(logp, ref, mask, "k2", "token-mean").item() == pytest.approx(0.25)
    assert kl_loss(logp, ref, mask, "k2", "seq-mean-token-mean").item() == pytest.approx(0.21875)
    per_token = kl_penalty(logp, ref, "k2", mask)
    assert (
        kl_loss(logp, ref, mask, "k2", "seq-mean-token-sum").item()
        == aggregate_loss(per_token, mask, "seq-mean-token-sum").item()
    )


def test_controllers() -> None:
    fixed = FixedKLController(0.01)
    fixed.update(5.0, 100)
    assert fixed.value == 0.01
    adaptive = AdaptiveKLController(0.1, target=0.1, horizon=100)
    adaptive.update(0.2, n_steps=10)  # error clip(1.0) = 0.2 -> *= 1 + 0.2 * 10/100
    assert adaptive.value == pytest.approx(0.102)
    adaptive.update(0.05, n_steps=10)  # error -0.5 -> -0.2 -> *= 0.98
    assert adaptive.value == pytest.approx(0.102 * 0.98)
    adaptive.update(0.11, n_steps=10)  # error 0.1 -> *= 1.01
    assert adaptive.value == pytest.approx(0.102 * 0.98 * 1.01)
    with pytest.raises(ValueError):
        AdaptiveKLController(0.1, target=0.0, horizon=10)
