"""Prediction rows: what one evaluated sample records, and its score under the current reward config.

A row holds the generation (``prediction``, ``output_tokens``, ``truncated``) under a settings
digest and a prompt digest, plus the score fields the benchmark's scorer returned. Scores are
cheap to redo and generations are not, so each row also records the digest of the reward config
that scored it: a rerun with another reward config (a judge added, ``require_think`` changed)
re-scores the stored responses instead of generating them again.
"""

from __future__ import annotations

import hashlib
from typing import Any

from ..data.records import Record
from ..rewards import RewardConfig
from .config import digest_of
from .registry import BenchmarkSpec

_SCORE_KEYS = ("sample_id", "index", "settings", "prompt_sha", "failed", "error", "prediction")
# what the generation recorded besides the prediction (kept when a row is re-scored)
_GENERATION_KEYS = ("output_tokens", "truncated", "episode")


def prompt_sha(prompt: str) -> str:
    return hashlib.sha256(prompt.encode()).hexdigest()[:12]


def reward_digest(reward: RewardConfig | None) -> str:
    return digest_of(reward or RewardConfig())


def failure_row(sample_id: str, index: int, settings: str, prompt: str, error: str) -> dict[str, Any]:
    """A sample whose media could not be loaded or whose request failed: counted as wrong."""
    return {
        "sample_id": sample_id,
        "index": index,
        "settings": settings,
        "prompt_sha": prompt_sha(prompt),
        "failed": True,
        "error": error,
        "prediction": None,
        "accuracy": 0.0,
    }


def scored_row(
    spec: BenchmarkSpec,
    record: Record,
    sample_id: str,
    index: int,
    settings: str,
    prompt: str,
    response: str,
    *,
    output_tokens: int | None = None,
    truncated: bool | None = None,
    reward: RewardConfig | None = None,
    episode: dict[str, Any] | None = None,
) -> dict[str, Any]:
    row = {
        "sample_id": sample_id,
        "index": index,
        "settings": settings,
        "prompt_sha": prompt_sha(prompt),
        "failed": False,
        "prediction": response,
        "output_tokens": output_tokens,
        "truncated": truncated,
    }
    if episode is not None:  # a multi-turn sample (tools): its turns and calls (evaluation/pipeline.py)
        row["episode"] = episode
    return rescore(spec, record, row, reward)


def rescore(spec: BenchmarkSpec, record: Record, row: dict, reward: RewardConfig | None) -> dict:
    """``row`` with score fields from the benchmark's scorer under ``reward`` (failures stay failures)."""
    digest = reward_digest(reward)
    if row.get("failed") or row.get("scoring") == digest:
        return row
    kept = {k: v for k, v in row.items() if k in _SCORE_KEYS or k in _GENERATION_KEYS}
    result = spec.score_response(
        record,
        str(row.get("prediction") or ""),
        reward_config=reward,
        response_length=row.get("output_tokens"),
    )
    extracted = result.get("extracted", result.get("prediction"))
    score = {k: v for k, v in result.items() if k not in ("prediction", "extracted", "task")}
    return {**kept, **score, "extracted": extracted, "scoring": digest}
