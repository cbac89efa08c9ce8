"""Validation: generate for held-out prompts, score with the reward library, aggregate by task.

With a video probe (``trainer.video_probe_every``, ``data/probe.py``) the prompts that have a
video are validated again with their frames blanked or shuffled; :func:`probe_summary` sets the
probed accuracy beside the real accuracy of the same prompts.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections import defaultdict

import torch

from ..data.dataset import encode_prompts
from ..rollout.base import SamplingConfig
from .distributed import all_gather
from .experience import score


def validate_policy(trainer, probes: bool = False) -> dict[str, float]:
    """``trainer``'s validation metrics; with ``probes``, also each ``trainer.video_probe`` run on
    the prompts that have a video, and its gap to the real accuracy. Each rank validates its slice
    with its own rollout engine; rank 0 appends a few generations to ``generations.jsonl``."""
    if not trainer.val_idx:
        return {}
    state, val_set = trainer.dist, trainer.val_set
    mine = trainer.val_idx[state.rank :: state.world]

    def run(indices: list[int], probe: str | None = None) -> list[dict]:
        rows = evaluate(
            trainer.engine,
            trainer.processor,
            val_set,
            indices,
            trainer.val_sampling,
            trainer.cfg.reward,
            probe=probe,
        )
        return sorted((g for part in all_gather(rows) for g in part), key=lambda g: g["index"])

    generations = run(mine)
    metrics = summarize(generations)
    shown = list(generations[:8])
    if probes:  # every rank probes its own video prompts (all ranks take part in the gathers)
        with_video = [i for i in mine if has_video(val_set, i)]
        for probe in trainer.cfg.trainer.video_probe:
            probed = run(with_video, probe)
            metrics.update(probe_summary(generations, probed, probe))
            shown += [{**g, "probe": probe} for g in probed[:4]]
    if not state.is_main:
        return metrics
    path = os.path.join(trainer.cfg.trainer.output_dir, "generations.jsonl")
    with open(path, "a", encoding="utf-8") as f:
        for g in shown:
            f.write(json.dumps({"step": trainer.step, **g}) + "\n")
    return metrics


@torch.no_grad()
def evaluate(
    engine,
    processor,
    dataset,
    indices: list[int],
    sampling: SamplingConfig,
    reward_cfg,
    batch_size: int = 16,
    probe: str | None = None,
) -> list[dict]:
    """One row per prompt: the generation and its scores (aggregate rows with :func:`summarize`).

    ``probe`` (``blank``/``shuffle``) blanks or shuffles every prompt's video frames as they load."""
    generations = []
    for start in range(0, len(indices), batch_size):
        samples = [dataclasses.replace(dataset[i], probe=probe) for i in indices[start : start + batch_size]]
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


# metric names of each probe: the probed accuracy and the gap (real minus probed)
PROBE_METRICS = {
    "blank": ("accuracy_blank_video", "video_gap"),
    "shuffle": ("accuracy_shuffled_video", "video_gap_shuffled"),
}


def has_video(dataset, index: int) -> bool:
    """Whether validation prompt ``index`` shows a video (only those are probed)."""
    return bool(dataset.records[index].videos)


def probe_summary(real: list[dict], probed: list[dict], probe: str) -> dict[str, float]:
    """The probed accuracy and its gap to the real accuracy of the *same* prompts, overall
    (``val/accuracy_blank_video``, ``val/video_gap``) and per task (``val/<task>/...``, as
    :func:`summarize` names them). ``real`` rows are matched to ``probed`` rows by ``index``;
    prompts without a video are not probed, so they are in neither number. No probed rows: ``{}``."""
    acc_name, gap_name = PROBE_METRICS[probe]
    by_index = {g["index"]: g for g in real}
    # None: every probed prompt (a task may be called anything, "all" included)
    sums: dict[str | None, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])  # probed, real, count
    for g in probed:
        twin = by_index.get(g["index"])
        if twin is None:
            raise ValueError(f"probed validation row {g['index']} ({g['problem_id']}) has no real row")
        for group in (None, g["task"]):
            s = sums[group]
            s[0] += g["accuracy"]
            s[1] += twin["accuracy"]
            s[2] += 1
    metrics = {}
    for group, (acc, real_acc, n) in sums.items():
        prefix = "val" if group is None else f"val/{group}"
        metrics[f"{prefix}/{acc_name}"] = acc / n
        metrics[f"{prefix}/{gap_name}"] = (real_acc - acc) / n
    return metrics
