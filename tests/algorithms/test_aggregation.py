"""Loss aggregation: hand values per mode, and exact micro-batch / data-parallel equivalence."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from easyvideor1.algorithms import LOSS_AGG_MODES, GlobalBatchStats, aggregate_loss

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, float("nan"), float("-inf")]])  # padding may hold garbage
MASK = torch.tensor([[1, 1, 1], [1, 0, 0]])


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", 2.5),  # (1+2+3+4) / 4 tokens
        ("seq-mean-token-mean", 3.0),  # (6/3 + 4/1) / 2
        ("seq-mean-token-sum", 5.0),  # (6 + 4) / 2
        ("seq-mean-token-sum-norm", 1.25),  # (6 + 4) / (2 * L=4)
    ],
)
def test_modes_by_hand(mode: str, expected: float) -> None:
    assert aggregate_loss(LOSS, MASK, mode, norm_length=4).item() == pytest.approx(expected)


def test_mode_names_and_errors() -> None:
    assert aggregate_loss(LOSS, MASK, "seq_mean_token_mean").item() == pytest.approx(3.0)
    with pytest.raises(ValueError, match=r"did you mean 'token-mean'.*; known: .*token-mean"):
        aggregate_loss(LOSS, MASK, "token-median")
    with pytest.raises(ValueError, match="norm_length"):
        aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm")
    with pytest.raises(ValueError, match="shape"):
        aggregate_loss(LOSS[:, :2], MASK, "token-mean")


def test_stats_count_tokens_and_nonempty_sequences() -> None:
    masks = [torch.tensor([[1, 1, 0], [0, 0, 0]]), torch.tensor([[1, 1, 1, 1, 1]])]
    assert GlobalBatchStats.from_masks(masks, dp_size=4) == GlobalBatchStats(7, 2, 4)
    with pytest.raises(ValueError):
        GlobalBatchStats(1, 1, 0)


def _make_batch(lengths: list[int], width: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token losses depending on a parameter vector (so gradients can be compared) and the mask."""
    g = torch.Generator().manual_seed(seed)
    features = torch.randn(len(lengths), width, 3, generator=g, dtype=torch.float64)
    theta = torch.randn(3, generator=g, dtype=torch.float64)
    mask = torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    return features, theta, mask


def _loss_and_grad(features, theta, mask, mode, stats, norm_length=7) -> tuple[float, torch.Tensor]:
    param = theta.clone().requires_grad_(True)
    loss = aggregate_loss(
        torch.tanh(features @ param), mask, mode, global_stats=stats, norm_length=norm_length
    )
    loss.backward()
    return loss.item(), param.grad


def _micro_batches(features, mask, sizes: list[int]):
    """Split rows into micro-batches of `sizes`, each trimmed to its widest sequence (dynamic batching)."""
    start = 0
    for size in sizes:
        f, m = features[start : start + size], mask[start : start + size]
        width = max(int(m.sum(-1).max()), 1)
        yield f[:, :width], m[:, :width]
        start += size


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 7), min_size=1, max_size=9),
    cuts=st.lists(st.integers(1, 4), min_size=1, max_size=9),
    mode=st.sampled_from(LOSS_AGG_MODES),
    seed=st.integers(0, 10_000),
)
def test_micro_batches_sum_to_the_full_batch(
    lengths: list[int], cuts: list[int], mode: str, seed: int
) -> None:
    features, theta, mask = _make_batch(lengths, 7, seed)
    full_loss, full_grad = _loss_and_grad(features, theta, mask, mode, None)
    sizes, left = [], len(lengths)
    for c in cuts:  # uneven micro-batch sizes covering every row
        if left == 0:
            break
        sizes.append(min(c, left))
        left -= sizes[-1]
    if left:
        sizes.append(left)
    stats = GlobalBatchStats.from_masks(m for _, m in _micro_batches(features, mask, sizes))
    total_loss, total_grad = 0.0, torch.zeros_like(theta)
    for f, m in _micro_batches(features, mask, sizes):
        loss, grad = _loss_and_grad(f, theta, m, mode, stats)
        total_loss += loss
        total_grad += grad
    assert total_loss == pytest.approx(full_loss, rel=1e-12, abs=1e-12)
    assert torch.allclose(total_grad, full_grad, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_data_parallel_average_recovers_the_global_aggregate(mode: str) -> None:
    lengths = [5, 1, 3, 7, 2, 6]
    features, theta, mask = _make_batch(lengths, 7, 3)
    full_loss, full_grad = _loss_and_grad(features, theta, mask, mode, None)
    ranks = [[0, 1, 2, 3], [4, 5]]  # unequal shards, as dynamic batching produces
    stats = GlobalBatchStats.from_mask(mask, dp_size=2)  # what all_reduce() would give on each rank
    rank_grads, rank_losses = [], []
    for rows in ranks:
        loss, grad = 0.0, torch.zeros_like(theta)
        for r in rows:  # one sequence per micro-batch
            micro_loss, micro_grad = _loss_and_grad(features[r : r + 1], theta, mask[r : r + 1], mode, stats)
            loss, grad = loss + micro_loss, grad + micro_grad
        rank_losses.append(loss)
        rank_grads.append(grad)
    # DDP/FSDP average the gradients over ranks
    assert torch.allclose(sum(rank_grads) / 2, full_grad, rtol=1e-12)
    assert sum(rank_losses) / 2 == pytest.approx(full_loss, rel=1e-12)


def test_token_share_reweighting_would_bias_sequence_mode() -> None:
    # The reference scaled each micro-batch's own seq-mean by its token share; with micro-batches of
    # one sequence that averages per-sequence means weighted by length, not uniformly.
    loss = torch.tensor([[1.0, 1.0, 1.0, 0.0], [3.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    reference_style = sum(
        aggregate_loss(loss[i : i + 1], mask[i : i + 1], "seq-mean-token-mean") * mask[i].sum() / mask.sum()
        for i in range(2)
    )
    assert reference_style.item() == pytest.approx(1.5)  # (1*3 + 3*1) / 4
    stats = GlobalBatchStats.from_mask(mask)
    ours = sum(
        aggregate_loss(loss[i : i + 1], mask[i : i + 1], "seq-mean-token-mean", global_stats=stats)
        for i in range(2)
    )
    assert ours.item() == pytest.approx(2.0)  # (1 + 3) / 2, the true sequence mean


def test_all_reduce_is_a_noop_without_a_process_group() -> None:
    stats = GlobalBatchStats(10, 2)
    assert stats.all_reduce() is stats


def test_all_reduce_with_a_single_rank_gloo_group(tmp_path) -> None:
    import torch.distributed as dist

    if not dist.is_available() or dist.is_initialized():
        pytest.skip("torch.distributed unavailable or already initialised")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        assert GlobalBatchStats(10, 2, 1).all_reduce() == GlobalBatchStats(10, 2, 1)
    finally:
        dist.destroy_process_group()
