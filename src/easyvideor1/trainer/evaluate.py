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
) -> tuple[dict[str, float], list[dict]]:
    """Mean reward / accuracy / format overall and per task, plus the generations."""
    sums: dict[str, float] = defaultdict(float)
    counts: dict[str, int] = defaultdict(int)
    generations = []
    for start in range(0, len(indices), batch_size):
        samples = [dataset[i] for i in indices[start : start + batch_size]]
        batch = encode_prompts(processor, samples, dataset.cfg, dataset.loader)
        out = engine.generate(batch, [1] * len(samples), sampling)
        scores, tasks, _ = score(
            out.texts, samples, list(range(len(samples))), out.mask.sum(1).tolist(), reward_cfg
        )
        for i, s in enumerate(samples):
            for key in ("overall", "accuracy", "format"):
                v = float(scores[key][i])
                sums[f"val/{key}"] += v
                sums[f"val/{tasks[i]}/{key}"] += v
            counts["all"] += 1
            counts[tasks[i]] += 1
            generations.append(
                {
                    "problem_id": s.record.problem_id,
                    "response": out.texts[i],
                    "answer": s.record.answer,
                    "accuracy": float(scores["accuracy"][i]),
                }
            )
    metrics = {}
    for k, v in sums.items():
        parts = k.split("/")
        metrics[k] = v / counts["all" if len(parts) == 2 else parts[1]]
    return metrics, generations
