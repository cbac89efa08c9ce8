"""What a step's metrics are made of beyond the rewards (``metrics.py``): which of them count things
(summed over ranks; every other metric is averaged) and the tool use of a step's episodes.
"""

from __future__ import annotations

# metrics that count things per step (summed over ranks; every other metric is averaged)
COUNT_METRICS = (
    "reward/errors",
    "reward/judge_failures",
    "reward/judge_cache_hits",
    "reward/unscored",
    "hybrid/groups_with_offline",
    "hybrid/offline_truncated",
    "filter/kept_groups",
    "filter/dropped_groups",
    "data/dropped_overlong",
    "data/skipped_records",
)


def tool_metrics(episodes: list) -> dict[str, float]:
    """``tools/*`` of a step's episodes: calls, invalid calls and errors per episode, tool turns,
    the share of episodes that called a tool and that answered."""
    n = max(len(episodes), 1)
    return {
        "tools/calls_per_episode": sum(e.counts["calls"] for e in episodes) / n,
        "tools/invalid_calls": float(sum(e.counts["invalid_calls"] for e in episodes)),
        "tools/errors": float(sum(e.counts["errors"] for e in episodes)),
        "tools/turns_per_episode": sum(e.tool_turns for e in episodes) / n,
        "tools/call_rate": sum(1 for e in episodes if e.counts["calls"]) / n,
        "tools/answered_rate": sum(1 for e in episodes if e.finish == "answer") / n,
    }
