"""Scoring a round's responses: the rewards of each response from the record it answers (the
reward library's batch scoring: expensive tasks in its process pool, judged ones asked of the
endpoint concurrently), the endpoint judge's counters, and the tool-use shaping of episodes.
"""

from __future__ import annotations

import torch

from ..data.dataset import MediaSample
from ..models.inputs import PromptBatch
from ..rewards import score_records
from .experience import SCORE_KEYS, Experience, Response, Scores, stacked
from .step_metrics import tool_metrics


def judge_counters(rows: list[dict]) -> dict[str, float]:
    """``reward/judge_*`` of one batch's results (empty when no result went to an endpoint judge)."""
    judged = [r for r in rows if "judge_cached" in r or "judge_error" in r]
    if not judged:
        return {}
    latency = [r["judge_latency_s"] for r in judged if "judge_latency_s" in r]
    return {
        "reward/judge_failures": float(sum(1 for r in judged if r.get("judge_error"))),
        "reward/judge_cache_hits": float(sum(1 for r in judged if r.get("judge_cached"))),
        "reward/judge_latency_s": sum(latency) / len(latency) if latency else 0.0,
        "reward/unscored": float(sum(1 for r in rows if r.get("unscored"))),
    }


def score(
    texts: list[str], samples: list[MediaSample], prompt_of: list[int], lengths: list[int], reward_cfg
) -> Scores:
    """Rewards of each response from the record it answers, scored as one batch
    (``rewards.score_records``: expensive tasks in its process pool, judged ones asked of the
    endpoint concurrently): a round's, the online part of hybrid groups, the greedy baseline's."""
    records = [samples[p].record for p in prompt_of]
    rows = score_records(texts, records, lengths, reward_cfg)
    values = {k: torch.tensor([float(r[k]) for r in rows], dtype=torch.float32) for k in SCORE_KEYS}
    unscored = torch.tensor([bool(r.get("unscored")) for r in rows], dtype=torch.bool)
    errors = sum(1 for r in rows if r.get("error"))
    return Scores(values, [r["task"] for r in rows], errors, unscored, judge_counters(rows))


def scored_experience(
    batch: PromptBatch, samples: list[MediaSample], groups: list[list[Response]], pad_id: int, reward_cfg
) -> Experience:
    """The groups as padded tensors, scored: rewards, the judge's counters, and with episodes the
    tool shaping of ``reward.tools`` and the policy's tool-use metrics."""
    exp = stacked(batch, groups, pad_id)
    scored = score(exp.texts, samples, exp.prompt_of, exp.mask.sum(1).tolist(), reward_cfg)
    exp.scores, exp.tasks = scored.values, scored.tasks
    exp.metrics["reward/errors"] = float(scored.errors)
    exp.metrics.update(scored.judge)
    if scored.unscored is not None and bool(scored.unscored.any()):
        exp.unscored = scored.unscored
    flat = [r for group in groups for r in group]
    if any(r.episode is not None for r in flat):  # reward.tools: shaping by the episode's tool use
        shaping = torch.tensor(
            [reward_cfg.tools.shaping(r.episode.counts) if r.episode else 0.0 for r in flat]
        )
        exp.scores["overall"] = exp.scores["overall"] + shaping
        exp.metrics["reward/tool_shaping"] = float(shaping.mean())
    # the policy's own episodes (offline ones replay given turns: not the policy's tool use)
    episodes = [r.episode for r in flat if r.episode is not None and not r.offline]
    if episodes:
        exp.metrics.update(tool_metrics(episodes))
    return exp
