"""Rollout correction (``algorithm.rollout_correction``): weights against a hand computation,
the refusals, and a trainer step whose engine log-probs are off by known amounts."""

from __future__ import annotations

import math

import pytest
import torch

from easyvideor1.algorithms import AlgorithmConfig
from easyvideor1.algorithms.rollout_correction import rollout_correction

NAN = float("nan")
# 2 sequences x 4 tokens: sequence 0 has 3 tokens (the last padding), sequence 1 an offline first
# token (no engine log-prob) then 3 sampled ones
OLD = torch.tensor([[-1.0, -2.0, -0.5, 0.0], [-0.3, -1.0, -2.0, -0.1]])
ROLLOUT = torch.tensor([[-1.5, -1.0, -0.5, NAN], [NAN, -3.0, -1.9, -0.2]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])


def _by_hand(old, rollout, mask, cap, level="token"):
    """Per-token rho = exp(old - rollout) (or the product over a sequence's sampled tokens)."""
    rho = [[None] * 4 for _ in range(2)]
    for i in range(2):
        sampled = [j for j in range(4) if mask[i][j] and not math.isnan(rollout[i][j])]
        seq = math.exp(sum(old[i][j] - rollout[i][j] for j in sampled))
        for j in sampled:
            rho[i][j] = seq if level == "sequence" else math.exp(old[i][j] - rollout[i][j])
    return rho


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_tis_weights_are_the_truncated_ratios_by_hand(level):
    c = rollout_correction(OLD, ROLLOUT, MASK, "tis", level, cap=2.0)
    rho = _by_hand(OLD.tolist(), ROLLOUT.tolist(), MASK.tolist(), 2.0, level)
    for i in range(2):
        for j in range(4):
            want = 1.0 if rho[i][j] is None else min(rho[i][j], 2.0)
            assert float(c.weights[i, j]) == pytest.approx(want, rel=1e-6), (i, j)
    assert torch.equal(c.keep, MASK.bool())  # tis drops nothing
    flat = [r for row in rho for r in row if r is not None]
    assert c.metrics["rollout/is_weight_mean"] == pytest.approx(sum(min(r, 2.0) for r in flat) / len(flat))
    assert c.metrics["rollout/is_clipped_frac"] == pytest.approx(sum(r > 2.0 for r in flat) / len(flat))


def test_mis_drops_tokens_and_sequences_outside_the_band():
    # token ratios: row 0: e^0.5, e^-1, 1; row 1: -, e^2, e^-0.1, e^0.1; band [0.5, 2]
    c = rollout_correction(OLD, ROLLOUT, MASK, "mis", "token", cap=2.0)
    dropped = [(0, 1), (1, 1)]  # e^-1 = 0.37 < 0.5, e^2 = 7.4 > 2
    for i in range(2):
        for j in range(4):
            if (i, j) in dropped:
                assert not c.keep[i, j] and c.weights[i, j] == 0
    assert float(c.weights[0, 0]) == pytest.approx(math.exp(0.5)) and c.keep[1, 0] and c.weights[1, 0] == 1
    assert c.metrics["rollout/is_clipped_frac"] == pytest.approx(2 / 6)
    # sequence level: row 0's product e^-0.5 = 0.61 is inside, row 1's e^2 is not: all of row 1's
    # sampled tokens go (its offline token stays)
    s = rollout_correction(OLD, ROLLOUT, MASK, "mis", "sequence", cap=2.0)
    assert s.keep[0, :3].all() and not s.keep[1, 1:].any() and s.keep[1, 0]
    assert float(s.weights[0, 0]) == pytest.approx(math.exp(-0.5))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"rollout_correction": "is"}, "algorithm.rollout_correction must be one of none, tis, mis"),
        ({"rollout_correction_cap": 1.0}, "algorithm.rollout_correction_cap must be > 1"),
        ({"rollout_correction_lower": 1.5}, "algorithm.rollout_correction_lower must be in (0, 1)"),
        ({"rollout_correction_level": "turn"}, "algorithm.rollout_correction_level must be one of"),
    ],
)
def test_bad_settings_are_refused_naming_the_key(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        AlgorithmConfig(**kwargs)


@pytest.mark.parametrize(
    "loss,expected",
    [
        # GMPO (veRL 0.9.1): one weight per sequence, the geometric mean of its tokens' (2 and 0.5): 1
        ("geo_mean", -math.exp(0.1)),
        # a token-level loss: each token's loss times its own weight, averaged: (2 + 0.5) / 2 = 1.25
        ("ppo", -math.exp(0.1) * 1.25),
    ],
)
def test_token_weights_enter_each_loss_as_it_defines_them(loss, expected):
    from easyvideor1.algorithms import aggregate_loss, compute_policy_loss

    old = torch.tensor([[-1.0, -1.0]], dtype=torch.float64)
    rollout = old - torch.tensor([[math.log(2.0), math.log(0.5)]], dtype=torch.float64)  # rho 2, 0.5
    mask = torch.ones(1, 2)
    weights = rollout_correction(old, rollout, mask, "tis", "token", cap=2.0).weights
    assert weights[0].tolist() == pytest.approx([2.0, 0.5])
    logp = (old + 0.1).requires_grad_()  # ratio e^0.1 on both tokens, inside the clip range
    adv = torch.ones(1, 2, dtype=torch.float64)
    out = compute_policy_loss(loss, logp, old, adv, mask, rollout_is_weights=weights)
    total = aggregate_loss(out.loss, mask, "seq-mean-token-mean")
    assert float(total.detach()) == pytest.approx(expected, rel=1e-7)
    total.backward()  # the weights scale the gradient, they carry none
    assert float(logp.grad.sum()) == pytest.approx(expected, rel=1e-7)
