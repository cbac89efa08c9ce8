"""Validation: generate for held-out prompts, score with the reward library, aggregate by task."""

from __future__ import annotations

from collections import defaultdict

import torch

from ..data.dataset import encode_prompts
from ..rollout.base import SamplingConfig
from .experience import score


@torch.no_grad()
def evaluate(
    engine, processor, dataset, indices: list[int], sampling: SamplingConfig, reward_cfg, batch_size: int = 16
) -> list[dict]:
    """One row per prompt: the generation and its scores (aggregate rows with :func:`summarize`)."""
    generations = []
    for start in range(0, len(indices), batch_size):
        samples = [dataset[i] for i in indices[start : start + batch_size]]
        batch = encode_prompts(processor, samples, dataset.cfg, dataset.loader)
        out = engine.generate(batch, [1] * len(samples), sampling)
        scores, tasks, _ = score(
            out.texts, samples, list(range(len(samples))), out.mask.sum(1).tolist(), reward_cfg
        )
        for i, s in enumerate(samples):
            generations.append(
                {
                    "index": indices[start + i],
                    "problem_id": s.record.problem_id,
                    "task": tasks[i],
                    "response": out.texts[i],
                    "answer": s.record.answer,
                    **{k: float(scores[k][i]) for k in ("overall", "accuracy", "format")},
                }
            )
    return generations


def summarize(generations: list[dict]) -> dict[str, float]:
    """``val/<key>`` and ``val/<task>/<key>`` means of the rows :func:`evaluate` returns."""
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    for g in generations:
        for key in ("overall", "accuracy", "format"):
            sums[f"val/{key}"] += g[key]
            sums[f"val/{g['task']}/{key}"] += g[key]
        counts["all"] += 1
        counts[g["task"]] += 1
    metrics = {}
    for k, v in sums.items():
        parts = k.split("/")
        metrics[k] = v / counts["all" if len(parts) == 2 else parts[1]]
    return metrics
