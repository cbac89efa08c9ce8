"""One step's advantages from its scores, on one process or gathered over data-parallel ranks."""

from __future__ import annotations

import torch

from ..algorithms._registry import normalize_name
from ..algorithms.advantages import compute_advantages
from .distributed import DistState, all_gather
from .experience import Experience, score


def step_advantages(
    alg, exp: Experience, scores: torch.Tensor, samples, greedy, reward_cfg, state: DistState
) -> torch.Tensor:
    """``[N, T]`` advantages of ``exp`` with ``alg.adv_estimator``.

    ``scores`` are the shaped rewards (overlong penalty, KL-in-reward); GDPO reads the raw reward
    keys instead; ReMax needs ``greedy``, one greedy response per prompt, as its baseline.
    """
    name = normalize_name(alg.adv_estimator)
    opts = alg.advantage_options()
    values = {k: exp.scores[k] for k in alg.gdpo_reward_keys} if name == "gdpo" else scores
    if name == "remax":
        lengths = greedy.mask.sum(1).tolist()
        base, _, _ = score(greedy.texts, samples, list(range(len(samples))), lengths, reward_cfg)
        opts["baseline_scores"] = base["overall"][torch.tensor(exp.prompt_of)]
    if not state.enabled:
        return compute_advantages(name, values, exp.mask, exp.prompt_of, **opts).advantages.float()
    return _gathered(name, values, exp, len(samples), opts, state)


def _gathered(name, values, exp: Experience, n_prompts: int, opts: dict, state: DistState) -> torch.Tensor:
    """Advantages computed on every rank's scores at once (a few floats per sequence), then this
    rank's rows: identical to the single-process result for every estimator, batch-wide ones too."""
    keyed = values if isinstance(values, dict) else {"": values}
    mine = {
        "values": {k: v.tolist() for k, v in keyed.items()},
        "lengths": exp.mask.sum(1).tolist(),
        "prompt_of": exp.prompt_of,
        "n_prompts": n_prompts,
        "baseline": opts["baseline_scores"].tolist() if "baseline_scores" in opts else None,
    }
    parts = all_gather(mine)
    lengths = [n for p in parts for n in p["lengths"]]
    mask = torch.zeros(len(lengths), max(max(lengths, default=1), 1), dtype=exp.mask.dtype)
    for i, n in enumerate(lengths):
        mask[i, :n] = 1
    prompt_of, offset = [], 0
    for p in parts:
        prompt_of += [q + offset for q in p["prompt_of"]]
        offset += p["n_prompts"]
    every = {k: torch.tensor([x for p in parts for x in p["values"][k]]) for k in keyed}
    if mine["baseline"] is not None:
        opts["baseline_scores"] = torch.tensor([x for p in parts for x in p["baseline"]])
    out = compute_advantages(name, every if isinstance(values, dict) else every[""], mask, prompt_of, **opts)
    start = sum(len(p["lengths"]) for p in parts[: state.rank])
    rows = out.advantages.float()[start : start + len(exp)]
    adv = torch.zeros(exp.mask.shape, dtype=torch.float32)
    width = min(adv.shape[1], rows.shape[1])
    adv[:, :width] = rows[:, :width]
    return adv
