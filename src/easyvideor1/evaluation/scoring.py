"""Scoring one response for evaluation: the reward library for rule-based tasks, a judge otherwise.

Rule-based tasks (letters, numbers, yes/no, counts, IoU) are scored by the training reward library
(:func:`easyvideor1.rewards.score_record`). Open-ended answers have a judge-based official metric:
with ``reward.llm_judge`` set the judge's verdict is the accuracy; without one the sample is
``scored: False`` and its ROUGE is kept under its own names (``rouge_l`` ...), never as accuracy.
"""

from __future__ import annotations

from typing import Any

from ..data.records import Record
from ..rewards import RewardConfig, UnknownTaskError, resolve_task, score_record
from ..rewards.registry import load_callable

JUDGE_TASKS = frozenset({"open_ended"})
NO_JUDGE = "judge required: reward.llm_judge is not set"


def has_judge(config: RewardConfig | None) -> bool:
    return bool(config is not None and config.llm_judge)


def not_scored(reason: str, extracted: str | None, **proxies: Any) -> dict[str, Any]:
    """A sample the official metric cannot score here; proxies ride along under their own names."""
    return {
        "scored": False,
        "not_scored_reason": reason,
        "extracted": extracted,
        "prediction": extracted,
        **proxies,
    }


def judged(verdict: float, extracted: str | None, **extra: Any) -> dict[str, Any]:
    acc = min(1.0, max(0.0, float(verdict)))
    return {
        "scored": True,
        "accuracy": acc,
        "judge": float(verdict),
        "extracted": extracted,
        "prediction": extracted,
        **extra,
    }


def call_judge(config: RewardConfig, prediction: str, truth: str, **meta: Any) -> float:
    """The configured judge's verdict in [0, 1]: ``fn(prediction, truth, **meta)``.

    ``meta`` carries the question and, for benchmarks with an official judge prompt, that prompt
    (``judge_prompt``) and how its reply reads (``judge_reply``: "correct" or "digit"); the built-in
    judges in ``judge.py`` honour them, a user's judge may ignore them.
    """
    fn = load_callable(str(config.llm_judge))
    return float(fn(prediction, truth, **meta))


def score_generic(
    record: Record, response: str, config: RewardConfig | None, response_length: int | None
) -> dict[str, Any]:
    """The default scorer: the reward library, with open-ended answers left to a judge."""
    try:
        task = resolve_task(record.problem_type).name
    except UnknownTaskError as error:
        raise UnknownTaskError(f"record {record.problem_id!r} ({record.source}): {error}") from None
    if task in JUDGE_TASKS and not has_judge(config):
        # ROUGE from the reward library without a judge: a proxy, kept under its own names
        res = score_record(response, record, config=RewardConfig(), response_length=response_length)
        proxies = {
            name: float(res[key])
            for name, key in (("rouge1", "rouge1"), ("rouge2", "rouge2"), ("rouge_l", "rougeL"))
            if isinstance(res.get(key), (int, float))
        }
        return not_scored(NO_JUDGE, res.get("prediction"), **proxies)
    res = score_record(response, record, config=config, response_length=response_length)
    out = {k: v for k, v in res.items() if k not in ("prediction",)}
    out["extracted"] = res.get("prediction")
    out["prediction"] = res.get("prediction")
    if task in JUDGE_TASKS:
        out["scored"] = True
    return out
