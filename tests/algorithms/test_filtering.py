"""DAPO dynamic sampling (group filter and round accumulator) and the soft overlong penalty."""

from __future__ import annotations

import pytest
import torch

from easyvideor1.algorithms import DynamicSampler, filter_groups, overlong_penalty

SCORES = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 0.25, 0.75])
IDS = ["a", "a", "b", "b", "c", "c", "d", "e", "e"]  # a: all 1, b: mixed, c: all 0, d: single, e: mixed


def test_std_criterion_keeps_groups_with_unequal_rewards() -> None:
    result = filter_groups(SCORES, IDS)
    assert result.keep.tolist() == [False, False, True, True, False, False, False, True, True]
    assert (result.kept_groups, result.dropped_groups) == (2, 3)
    assert (result.kept_rows, result.dropped_rows) == (4, 5)
    assert result.group_rank.tolist() == [0, 0, 1, 1, 2, 2, 3, 4, 4]  # by first appearance


def test_mean_criterion_is_strictly_inside_the_interval() -> None:
    # group means: a 1.0, b 0.5, c 0.0, d 1.0, e 0.5
    assert filter_groups(SCORES, IDS, criterion="mean").keep.tolist() == [
        False, False, True, True, False, False, False, True, True,
    ]  # fmt: skip
    # with (0.5, 1.0) nothing is strictly inside: 0.5 and 1.0 are the bounds themselves
    assert filter_groups(SCORES, IDS, criterion="mean", low=0.5, high=1.0).kept_groups == 0
    assert filter_groups(SCORES, IDS, criterion="mean", low=0.49, high=1.01).kept_groups == 4


def test_filter_on_a_reward_key_and_errors() -> None:
    rewards = {"accuracy": torch.tensor([1.0, 1.0, 0.0, 1.0]), "format": torch.tensor([1.0, 0.0, 1.0, 1.0])}
    assert filter_groups(rewards, [0, 0, 1, 1], key="accuracy").keep.tolist() == [False, False, True, True]
    assert filter_groups(rewards, [0, 0, 1, 1], key="format").keep.tolist() == [True, True, False, False]
    with pytest.raises(KeyError, match="overall"):
        filter_groups(rewards, [0, 0, 1, 1], key="overall")
    with pytest.raises(ValueError, match="criterion"):
        filter_groups(SCORES, IDS, criterion="variance")
    with pytest.raises(ValueError, match="entries"):
        filter_groups(SCORES, IDS[:-1])


def test_sampler_accumulates_rounds_and_truncates_whole_groups() -> None:
    sampler: DynamicSampler[str] = DynamicSampler(target_groups=3, max_tries=5)
    # round 1: groups 0 (mixed), 1 (uniform), 2 (mixed) -> 2 kept
    first = sampler.add_round(torch.tensor([0.0, 1.0, 1.0, 1.0, 1.0, 0.0]), [0, 0, 1, 1, 2, 2], payload="r1")
    assert (first.kept_groups, first.dropped_groups, first.total_kept_groups) == (2, 1, 2)
    assert first.should_continue
    # round 2: nothing kept (the reference raised here; we just go on)
    second = sampler.add_round(torch.tensor([1.0, 1.0]), [0, 0], payload="r2")
    assert (second.kept_groups, second.should_continue) == (0, True)
    # round 3: ids restart per round; groups 9 and 4 both mixed -> 4 kept in total, target reached
    third = sampler.add_round(torch.tensor([1.0, 0.0, 0.3, 0.6]), [9, 4, 9, 4], payload="r3")
    assert third.done and not third.should_continue and third.total_kept_groups == 4
    selection = sampler.selection()
    assert [s.payload for s in selection] == ["r1", "r3"]
    assert selection[0].rows.tolist() == [0, 1, 4, 5]
    assert selection[1].rows.tolist() == [0, 2]  # only group 9 (first to appear) fits the target of 3
    with pytest.raises(RuntimeError):
        sampler.add_round(torch.tensor([0.0, 1.0]), [0, 0])
    sampler.reset()
    assert sampler.rounds == 0 and sampler.selection() == []


def test_sampler_retry_budget() -> None:
    sampler: DynamicSampler[None] = DynamicSampler(target_groups=2, max_tries=2)
    assert sampler.add_round(torch.ones(2), [0, 0]).should_continue
    last = sampler.add_round(torch.tensor([0.0, 1.0]), [0, 0])
    assert last.exhausted and not last.done and not last.should_continue
    assert [s.rows.tolist() for s in sampler.selection()] == [[0, 1]]  # partial batch is available
    unlimited: DynamicSampler[None] = DynamicSampler(target_groups=1, max_tries=0)
    for _ in range(50):
        assert unlimited.add_round(torch.ones(2), [0, 0]).should_continue
    with pytest.raises(ValueError):
        DynamicSampler(target_groups=0)


def test_overlong_penalty_by_hand() -> None:
    # max 10, buffer 4: free up to 6 tokens, then -1/4 per token, -1 at 10 and beyond
    lengths = torch.tensor([5, 6, 7, 8, 10, 12])
    assert overlong_penalty(lengths, max_length=10, buffer=4).tolist() == [0.0, 0.0, -0.25, -0.5, -1.0, -1.0]
    assert overlong_penalty(lengths, max_length=10, buffer=4, factor=0.5).tolist() == [
        0.0, 0.0, -0.125, -0.25, -0.5, -0.5,
    ]  # fmt: skip
    mask = torch.tensor([[1] * 7 + [0] * 3, [1] * 10])
    assert overlong_penalty(mask, max_length=10, buffer=4).tolist() == [-0.25, -1.0]
    with pytest.raises(ValueError, match="buffer"):
        overlong_penalty(lengths, max_length=10, buffer=0)
