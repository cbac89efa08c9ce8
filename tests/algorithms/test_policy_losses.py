"""Policy losses against hand-computed values, including gradients."""

from __future__ import annotations

import math

import pytest
import torch

from easyvideor1.algorithms import aggregate_loss, compute_policy_loss
from easyvideor1.algorithms.policy_losses import cispo, gspo, gspo_token, ppo

LN = math.log


def leaf(values: list[list[float]]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64, requires_grad=True)


def test_ppo_asymmetric_and_dual_clip_by_hand() -> None:
    # ratios r and advantages A, eps_low .2, eps_high .28, dual c = 3; the 7th token is padding
    ratios = [1.5, 0.5, 0.5, 1.5, 5.0, 1.0, 1.0]
    adv = torch.tensor([[1.0, 1.0, -1.0, -1.0, -1.0, 2.0, 7.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1, 0]])
    logp = leaf([[-1.0] * 6 + [float("-inf")]])  # a banned token in the padding must not give NaN
    old = torch.tensor([[-1.0 - LN(r) for r in ratios]], dtype=torch.float64)
    out = ppo(logp, old, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_dual=3.0)
    # (a) A>0, r=1.5 -> clipped to -1.28; (b) A>0, r=.5 -> -0.5; (c) A<0, r=.5 -> clipped 0.8;
    # (d) A<0, r=1.5 -> 1.5; (e) A<0, r=5 -> dual clip 3; (f) r=1, A=2 -> -2; padding -> 0
    assert out.loss.tolist()[0] == pytest.approx([-1.28, -0.5, 0.8, 1.5, 3.0, -2.0, 0.0])
    out.loss.sum().backward()
    # d/dlogp of -A r is -A r where unclipped, 0 on clipped tokens (a, c, e) and on padding
    assert logp.grad.tolist()[0] == pytest.approx([0.0, -0.5, 0.0, 1.5, 0.0, -2.0, 0.0])
    m = {k: float(v) for k, v in out.metrics.items()}
    assert m["pg_clipfrac_higher"] == pytest.approx(1 / 6)
    assert m["pg_clipfrac_lower"] == pytest.approx(1 / 6)
    assert m["pg_clipfrac_dual"] == pytest.approx(1 / 6)
    # ppo_kl = mean(-log r) = -(2 ln1.5 + 2 ln.5 + ln5) / 6
    assert m["ppo_kl"] == pytest.approx(-0.1723457, abs=1e-6)


def test_ppo_without_dual_clip_and_log_ratio_clamp() -> None:
    logp = leaf([[0.0, 0.0]])
    old = torch.tensor([[-50.0, -50.0]], dtype=torch.float64)  # delta 50 is clamped to 20 before exp
    adv = torch.tensor([[1.0, -1.0]], dtype=torch.float64)
    out = ppo(logp, old, adv, torch.ones(1, 2), clip_ratio_dual=None)
    assert out.loss[0, 0].item() == pytest.approx(-1.28)
    assert out.loss[0, 1].item() == pytest.approx(math.exp(20.0))
    out.loss.sum().backward()
    assert torch.isfinite(logp.grad).all()
    assert logp.grad.tolist() == [[0.0, 0.0]]  # clamped (and clipped) -> no gradient


def test_gspo_uses_one_sequence_ratio_for_all_tokens() -> None:
    # seq 1: deltas ln1.1, ln1.3 -> ratio sqrt(1.43) = 1.1958261 (inside the clip range)
    # seq 2: deltas 0, ln 2 -> ratio sqrt 2 = 1.4142136 > 1.28 -> clipped for A > 0
    logp = leaf([[-1.0, -2.0], [-1.0, -2.0]])
    old = torch.tensor([[-1.0 - LN(1.1), -2.0 - LN(1.3)], [-1.0, -2.0 - LN(2.0)]], dtype=torch.float64)
    adv = torch.ones(2, 2, dtype=torch.float64)
    out = gspo(logp, old, adv, torch.ones(2, 2))
    assert out.loss.flatten().tolist() == pytest.approx([-1.1958261] * 2 + [-1.28] * 2)
    aggregate_loss(out.loss, torch.ones(2, 2), "seq-mean-token-mean").backward()
    # seq-mean over 2 sequences, token-mean over 2 tokens, d ratio/d logp_t = ratio / 2
    assert logp.grad.flatten().tolist() == pytest.approx([-1.1958261 / 4] * 2 + [0.0, 0.0])


def test_gspo_token_has_sequence_value_and_token_gradient() -> None:
    logp = leaf([[-1.0, -2.0, -3.0]])
    old = torch.tensor([[-1.0 - LN(1.1), -2.0 - LN(1.3), 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0]])
    adv = torch.tensor([[1.0, 2.0, 0.0]], dtype=torch.float64)
    out = gspo_token(logp, old, adv, mask)
    assert out.loss.tolist()[0] == pytest.approx([-1.1958261, -2.3916522, 0.0])
    out.loss.sum().backward()
    # each token's gradient is -A_t times the *sequence* ratio, through its own log-prob only
    assert logp.grad.tolist()[0] == pytest.approx([-1.1958261, -2.3916522, 0.0])


def test_gspo_token_matches_gspo_gradient_for_sequence_advantages() -> None:
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    base = torch.randn(3, 4, dtype=torch.float64)
    old = base + 0.05 * torch.randn(3, 4, dtype=torch.float64)
    adv = torch.tensor([[0.7], [-1.3], [0.4]], dtype=torch.float64).expand(3, 4)
    grads = []
    for loss_fn in (gspo, gspo_token):
        logp = base.clone().requires_grad_(True)
        out = loss_fn(logp, old, adv, mask)
        aggregate_loss(out.loss, mask, "seq-mean-token-mean").backward()
        grads.append(logp.grad)
    assert torch.allclose(grads[0], grads[1], atol=1e-12)


def test_cispo_by_hand_and_gradient_only_through_logp() -> None:
    logp = leaf([[LN(0.3), LN(0.2), LN(0.5), 0.0]])
    old = torch.tensor([[LN(0.3) - LN(1.5), LN(0.2) - LN(0.5), LN(0.5), 0.0]], dtype=torch.float64)
    old.requires_grad_(True)
    adv = torch.tensor([[1.0, -1.0, 2.0, 5.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0]])
    out = cispo(logp, old, adv, mask)
    # weights clip([1.5, .5, 1], .8, 1.28) = [1.28, .8, 1]; loss = -A w logp
    assert out.loss.tolist()[0] == pytest.approx([1.5410852, -1.2875503, 1.3862944, 0.0])
    out.loss.sum().backward()
    assert logp.grad.tolist()[0] == pytest.approx([-1.28, 0.8, -2.0, 0.0])
    assert old.grad is None  # the IS weight is detached
    assert float(out.metrics["pg_clipfrac_higher"]) == pytest.approx(1 / 3)
    assert float(out.metrics["pg_clipfrac_lower"]) == pytest.approx(1 / 3)


def test_ratio_one_is_plain_policy_gradient_for_every_loss() -> None:
    # on-policy (one update per rollout batch): all losses reduce to -A * r with gradient -A
    logp = torch.tensor([[-0.5, -1.5]], dtype=torch.float64)
    adv = torch.tensor([[1.5, -0.5]], dtype=torch.float64)
    for name in ("ppo", "vanilla", "gspo", "gspo_token", "cispo"):
        x = logp.clone().requires_grad_(True)
        out = compute_policy_loss(name, x, logp, adv, torch.ones(1, 2), clip_ratio_low=0.2, gamma=0.9)
        out.loss.sum().backward()
        expected_grad = [-1.5, 0.5] if name != "gspo" else [-0.5, -0.5]  # gspo: d mean / d logp_t = 1/2
        assert x.grad.tolist()[0] == pytest.approx(expected_grad), name
        assert float(out.metrics["ppo_kl"]) == 0.0


def test_shape_and_option_validation() -> None:
    with pytest.raises(ValueError, match="share one"):
        ppo(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 2), torch.ones(2, 3))
    with pytest.raises(ValueError, match="clip_ratio_dual"):
        ppo(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), clip_ratio_dual=0.5)
    with pytest.raises(ValueError, match="clip_ratio_low"):
        cispo(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1, 1), clip_ratio_low=1.0)


@pytest.mark.parametrize("name", ["ppo", "gspo", "gspo_token", "cispo"])
def test_garbage_in_padding_never_reaches_loss_or_gradient(name: str) -> None:
    logp = torch.tensor([[-0.7, float("-inf"), float("nan")]], requires_grad=True)
    old = torch.tensor([[-0.9, float("-inf"), 3.0]])
    adv = torch.tensor([[1.0, float("nan"), float("inf")]])
    mask = torch.tensor([[1, 0, 0]])
    out = compute_policy_loss(name, logp, old, adv, mask)
    assert out.loss[0, 1:].tolist() == [0.0, 0.0]
    aggregate_loss(out.loss, mask, "token-mean").backward()
    assert torch.isfinite(logp.grad).all() and logp.grad[0, 1:].tolist() == [0.0, 0.0]
    assert all(torch.isfinite(v) for v in out.metrics.values())


def test_geo_mean_counts_a_clipped_token_only_on_the_side_its_advantage_makes_active() -> None:
    # log-ratios 0.5 (above clip_ratio_high 0.28) and -0.5 (below -clip_ratio_low -0.2) in both rows
    delta = torch.tensor([[0.5, -0.5], [0.5, -0.5]])
    adv = torch.tensor([[1.0, 1.0], [-1.0, -1.0]])
    out = compute_policy_loss("geo_mean", delta, torch.zeros(2, 2), adv, torch.ones(2, 2))
    # A > 0: only the upper bound binds (token 0); A < 0: only the lower one (token 3)
    assert out.metrics["pg_clipfrac_higher"].item() == pytest.approx(0.25)
    assert out.metrics["pg_clipfrac_lower"].item() == pytest.approx(0.25)
