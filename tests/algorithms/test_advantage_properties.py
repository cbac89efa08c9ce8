"""Property tests (hypothesis) of the advantage estimators and of masked whitening."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from easyvideor1.algorithms.advantages import grpo, reinforce_plus_plus, rloo
from easyvideor1.algorithms.masked import masked_whiten

# Rewards on a coarse grid, like verifiable rewards (0/1, thirds, IoU-like), so equal values do occur.
REWARD = st.sampled_from([0.0, 0.1, 1 / 3, 0.5, 0.9, 1.0, 2.0])


@st.composite
def grouped_batch(draw):
    group_sizes = draw(st.lists(st.integers(1, 6), min_size=1, max_size=6))
    ids = [g for g, size in enumerate(group_sizes) for _ in range(size)]
    ids = draw(st.permutations(ids))  # groups need not be contiguous
    scores = torch.tensor(draw(st.lists(REWARD, min_size=len(ids), max_size=len(ids))), dtype=torch.float64)
    lengths = draw(st.lists(st.integers(1, 5), min_size=len(ids), max_size=len(ids)))
    mask = torch.arange(5).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    return scores, torch.tensor(ids), mask


def per_group(values: torch.Tensor, ids: torch.Tensor) -> dict[int, torch.Tensor]:
    return {int(g): values[ids == g] for g in ids.unique()}


@settings(max_examples=80, deadline=None)
@given(batch=grouped_batch(), unbiased=st.booleans())
def test_grpo_group_sums_zero_and_unit_rms(batch, unbiased: bool) -> None:
    scores, ids, mask = batch
    adv = grpo(scores, mask, ids, std_unbiased=unbiased).advantages[:, 0]
    assert torch.isfinite(adv).all()
    for g, values in per_group(adv, ids).items():
        group_scores = scores[ids == g]
        assert abs(values.sum().item()) < 1e-9
        if group_scores.numel() < 2 or (group_scores == group_scores[0]).all():
            assert (values == 0).all()
        else:
            # sum A^2 = n (population std) or n - 1 (Bessel), up to the eps in the denominator
            expected = group_scores.numel() - (1 if unbiased else 0)
            assert abs(values.square().sum().item() - expected) < 1e-4 * expected


@settings(max_examples=60, deadline=None)
@given(batch=grouped_batch(), scale=st.floats(0.5, 20.0), shift=st.floats(-5.0, 5.0))
def test_grpo_is_invariant_to_affine_reward_changes(batch, scale: float, shift: float) -> None:
    scores, ids, mask = batch
    a = grpo(scores, mask, ids, eps=1e-12).advantages
    b = grpo(scores * scale + shift, mask, ids, eps=1e-12).advantages
    assert torch.allclose(a, b, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(batch=grouped_batch())
def test_rloo_group_sums_zero_and_matches_scaled_centering(batch) -> None:
    scores, ids, mask = batch
    adv = rloo(scores, mask, ids).advantages[:, 0]
    for g, values in per_group(adv, ids).items():
        s = scores[ids == g]
        assert abs(values.sum().item()) < 1e-9
        if s.numel() > 1:  # RLOO = n/(n-1) * (s - mean), computed here independently
            assert torch.allclose(values, (s - s.mean()) * s.numel() / (s.numel() - 1), atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    values=st.lists(st.floats(-100, 100), min_size=12, max_size=12),
    valid=st.lists(st.booleans(), min_size=12, max_size=12),
)
def test_whitening_gives_mean_zero_std_one_over_valid_tokens(values, valid) -> None:
    x = torch.tensor(values, dtype=torch.float64).reshape(3, 4)
    mask = torch.tensor(valid).reshape(3, 4)
    out = masked_whiten(x, mask)
    assert (out[~mask] == 0).all()
    v = out[mask]
    if v.numel() and x[mask].var(unbiased=False) > 1e-3:
        assert abs(v.mean().item()) < 1e-9
        assert abs(v.var(unbiased=False).item() - 1.0) < 1e-4
    elif v.numel() and (x[mask] == x[mask][0]).all():
        assert (v == 0).all()  # constant input carries no signal: exactly zero


@settings(max_examples=40, deadline=None)
@given(batch=grouped_batch(), gamma=st.sampled_from([1.0, 0.99, 0.5]))
def test_reinforce_plus_plus_matches_a_python_loop(batch, gamma: float) -> None:
    scores, ids, mask = batch
    out = reinforce_plus_plus(scores, mask, gamma=gamma)
    for b in range(mask.shape[0]):  # independent reference: reward on the last valid token
        n = int(mask[b].sum())
        for t in range(n):
            assert abs(out.returns[b, t].item() - scores[b].item() * gamma ** (n - 1 - t)) < 1e-9
    valid = out.advantages[mask]
    if out.returns[mask].var(unbiased=False) > 1e-6:
        assert abs(valid.mean().item()) < 1e-9
