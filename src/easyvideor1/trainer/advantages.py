"""One step's advantages from its rewards, on one process or gathered over data-parallel ranks.

The estimator declares what it needs beyond the shaped rewards (``algorithms.advantage_inputs``):
the raw reward keys (GDPO) or a greedy response's score per prompt as its baseline (ReMax); the
trainer provides exactly those, with no estimator-specific branch.
"""

from __future__ import annotations

import torch

from ..algorithms.advantages import GREEDY_BASELINE, RAW_REWARD_KEYS, advantage_inputs, compute_advantages
from .distributed import DistState, all_gather
from .experience import Experience


def needs_greedy_baseline(alg) -> bool:
    """Whether ``alg.adv_estimator`` needs one greedy response per prompt (its baseline)."""
    return GREEDY_BASELINE in advantage_inputs(alg.adv_estimator)


def step_advantages(
    alg,
    exp: Experience,
    rewards: torch.Tensor,
    samples,
    baseline: torch.Tensor | None,
    state: DistState,
) -> torch.Tensor:
    """``[N, T]`` advantages of ``exp`` with ``alg.adv_estimator``.

    ``rewards`` are the shaped rewards (``[N]``, or ``[N, T]`` with the KL penalty in the reward);
    ``baseline`` holds the score of one greedy response per prompt (``[P]``, generated with the
    rollouts: ``rounds.greedy_baseline``) when the estimator declared ``GREEDY_BASELINE``.
    """
    name = alg.adv_estimator
    needs = advantage_inputs(name)
    opts = alg.advantage_options()
    values = {k: exp.scores[k] for k in alg.gdpo_reward_keys} if RAW_REWARD_KEYS in needs else rewards
    if GREEDY_BASELINE in needs:
        if baseline is None:  # the collection generates it when the estimator declares it
            raise RuntimeError(f"advantage estimator {name} needs one greedy response per prompt")
        opts["baseline_scores"] = baseline[torch.tensor(exp.prompt_of)]
    if not state.enabled:
        return scored_advantages(name, values, exp.mask, exp.prompt_of, opts, exp.unscored)
    return _gathered(name, values, exp, len(samples), opts, state)


def scored_advantages(name, values, mask, prompt_of, opts, unscored) -> torch.Tensor:
    """``compute_advantages`` over the rows that have a reward only: an unscored row (its judge
    gave no verdict) is not in its group's statistics and gets advantage 0."""
    if unscored is None or not bool(unscored.any()):
        return compute_advantages(name, values, mask, prompt_of, **opts).advantages.float()
    keep = (~unscored).nonzero().flatten()
    out = torch.zeros(mask.shape, dtype=torch.float32)
    if keep.numel() == 0:
        return out
    pick = {k: v[keep] for k, v in values.items()} if isinstance(values, dict) else values[keep]
    sub = dict(opts)
    if "baseline_scores" in sub:
        sub["baseline_scores"] = sub["baseline_scores"][keep]
    rows = compute_advantages(name, pick, mask[keep], [prompt_of[i] for i in keep.tolist()], **sub).advantages
    out[keep, : rows.shape[1]] = rows.float()
    return out


def _rows(values: torch.Tensor, lengths: list[int]) -> list:
    """Per-sequence values as lists: a float for ``[N]``, the valid tokens for ``[N, T]``."""
    if values.dim() == 1:
        return values.tolist()
    return [values[i, :n].tolist() for i, n in enumerate(lengths)]


def _stack(rows: list, lengths: list[int], width: int) -> torch.Tensor:
    """Inverse of :func:`_rows` over every rank's rows (token rows right-padded with zeros)."""
    if not rows or not isinstance(rows[0], list):
        return torch.tensor(rows)
    out = torch.zeros(len(rows), width)
    for i, (row, n) in enumerate(zip(rows, lengths, strict=True)):
        out[i, :n] = torch.tensor(row)
    return out


def _gathered(name, values, exp: Experience, n_prompts: int, opts: dict, state: DistState) -> torch.Tensor:
    """Advantages computed on every rank's rewards at once (a few floats per sequence, or per token
    with the KL penalty in the reward), then this rank's rows: identical to the single-process
    result for every estimator, batch-wide ones too."""
    keyed = values if isinstance(values, dict) else {"": values}
    lengths_mine = [int(n) for n in exp.real.sum(1).tolist()]  # an episode's tool turns included
    mine = {
        "values": {k: _rows(v, lengths_mine) for k, v in keyed.items()},
        "lengths": lengths_mine,
        # the loss mask of each row (an episode's has holes at its tool turns)
        "masks": [exp.mask[i, :n].tolist() for i, n in enumerate(lengths_mine)],
        "prompt_of": exp.prompt_of,
        "n_prompts": n_prompts,
        "baseline": opts["baseline_scores"].tolist() if "baseline_scores" in opts else None,
        "unscored": [] if exp.unscored is None else exp.unscored.nonzero().flatten().tolist(),
    }
    parts = all_gather(mine)
    lengths = [n for p in parts for n in p["lengths"]]
    width = max(max(lengths, default=1), 1)
    mask = torch.zeros(len(lengths), width, dtype=exp.mask.dtype)
    for i, row in enumerate(m for p in parts for m in p["masks"]):
        mask[i, : len(row)] = torch.tensor(row, dtype=exp.mask.dtype)
    prompt_of, offset = [], 0
    for p in parts:
        prompt_of += [q + offset for q in p["prompt_of"]]
        offset += p["n_prompts"]
    every = {k: _stack([x for p in parts for x in p["values"][k]], lengths, width) for k in keyed}
    if mine["baseline"] is not None:
        opts["baseline_scores"] = torch.tensor([x for p in parts for x in p["baseline"]])
    unscored, offset = torch.zeros(len(lengths), dtype=torch.bool), 0
    for p in parts:
        unscored[[offset + i for i in p["unscored"]]] = True
        offset += len(p["lengths"])
    out = scored_advantages(
        name, every if isinstance(values, dict) else every[""], mask, prompt_of, opts, unscored
    )
    start = sum(len(p["lengths"]) for p in parts[: state.data_rank])
    rows = out[start : start + len(exp)]
    adv = torch.zeros(exp.mask.shape, dtype=torch.float32)
    width = min(adv.shape[1], rows.shape[1])
    adv[:, :width] = rows[:, :width]
    return adv
