"""Log-probs and entropy from logits, including banned (-inf) tokens and fully masked rows."""

from __future__ import annotations

import math

import pytest
import torch

from easyvideor1.algorithms import entropy_from_logits, logprobs_from_logits

NEG_INF = float("-inf")
LN3 = math.log(3.0)


def test_logprobs_by_hand_with_a_banned_token() -> None:
    # softmax([0, ln 3, -inf]) = [.25, .75, 0]
    logits = torch.tensor([[[0.0, LN3, NEG_INF], [0.0, LN3, NEG_INF]]])
    ids = torch.tensor([[1, 0]])
    assert logprobs_from_logits(logits, ids).tolist()[0] == pytest.approx([math.log(0.75), math.log(0.25)])
    banned = logprobs_from_logits(logits, torch.tensor([[2, 0]]))
    assert banned[0, 0].item() == NEG_INF  # sampling a banned token is a real -inf, not a NaN


def test_temperature_divides_the_logits() -> None:
    logits = torch.tensor([[[0.0, 2 * LN3]]])
    assert logprobs_from_logits(logits, torch.tensor([[1]]), temperature=2.0).item() == pytest.approx(
        math.log(0.75)
    )


def test_masked_and_dead_rows_give_zero_and_finite_gradients() -> None:
    # row 0: a normal token; row 1: padding whose logits are all -inf; row 2: a banned token, masked out
    logits = torch.tensor([[[1.0, 2.0, NEG_INF], [NEG_INF, NEG_INF, NEG_INF], [0.0, 0.0, NEG_INF]]])
    logits.requires_grad_(True)
    ids = torch.tensor([[1, 0, 2]])
    mask = torch.tensor([[1, 0, 0]])
    logp = logprobs_from_logits(logits, ids, mask=mask)
    assert logp[0, 1:].tolist() == [0.0, 0.0]
    # log softmax([1, 2]) at index 1 = -log(1 + e^-1) = -0.3132617
    assert logp[0, 0].item() == pytest.approx(-0.3132617, abs=1e-6)
    logp.sum().backward()
    assert torch.isfinite(logits.grad).all()
    assert logits.grad[0, 1:].abs().sum().item() == 0.0
    # d/dz of log p_1 = onehot - softmax = [-.2689414, .2689414, 0]
    assert logits.grad[0, 0].tolist() == pytest.approx([-0.2689414, 0.2689414, 0.0], abs=1e-6)


def test_entropy_by_hand_with_banned_tokens() -> None:
    # p = [.25, .75]: H = -(.25 ln .25 + .75 ln .75) = 0.5623351; uniform over 4: ln 4 = 1.3862944
    logits = torch.tensor([[[0.0, LN3, NEG_INF, NEG_INF], [0.0, 0.0, 0.0, 0.0], [NEG_INF] * 4]])
    logits.requires_grad_(True)
    entropy = entropy_from_logits(logits)
    assert entropy.tolist()[0] == pytest.approx([0.5623351, 1.3862944, 0.0], abs=1e-6)
    entropy.sum().backward()  # usable as a bonus: no NaN from 0 * -inf
    assert torch.isfinite(logits.grad).all()
    masked = entropy_from_logits(logits.detach(), mask=torch.tensor([[1, 0, 1]]))
    assert masked.tolist()[0] == pytest.approx([0.5623351, 0.0, 0.0], abs=1e-6)


def test_matches_log_softmax_on_random_bf16_logits() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 11).to(torch.bfloat16)
    ids = torch.randint(0, 11, (2, 5))
    expected = torch.log_softmax(logits.float(), -1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    got = logprobs_from_logits(logits, ids)
    assert got.dtype == torch.float32
    assert torch.allclose(got, expected, atol=1e-6)
    with pytest.raises(ValueError, match="match"):
        logprobs_from_logits(logits, ids[:, :3])
