"""Scoring one response for evaluation: the reward library for rule-based tasks, a judge otherwise.

Rule-based tasks (letters, numbers, yes/no, counts, IoU) are scored by the training reward library
(:func:`easyvideor1.rewards.score_record`). Open-ended answers have a judge-based official metric:
with a judge (``reward.judge.url``, an OpenAI-compatible endpoint, or the callable
``reward.llm_judge``) the judge's verdict is the accuracy; without one the sample is
``scored: False`` and its ROUGE is kept under its own names (``rouge_l`` ...), never as accuracy.
A judge that gives no verdict (its request failed, its reply unreadable) leaves the sample
``scored: False`` with the reason, never a 0.
"""

from __future__ import annotations

from typing import Any

from ..data.records import Record
from ..rewards import RewardConfig, UnknownTaskError, resolve_task, score_record
from ..rewards.judge_scoring import JudgeFailed, ask_judge, judge_messages
from ..rewards.registry import load_callable

JUDGE_TASKS = frozenset({"open_ended"})
NO_JUDGE = "judge required: neither reward.judge.url nor reward.llm_judge is set"


def has_judge(config: RewardConfig | None) -> bool:
    return bool(config is not None and (config.llm_judge or config.judge.enabled))


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
    """The configured judge's verdict in [0, 1]; :class:`JudgeFailed` when it gives none.

    ``meta`` carries the question and, for benchmarks with an official judge prompt, that prompt
    (``judge_prompt``) and how its reply reads (``judge_reply``: "correct" or "judgement"). The
    endpoint (``reward.judge``) sends the official prompt as the only message, else the default
    or ``reward.judge.prompt``; a callable judge is called ``fn(prediction, truth, **meta)`` (the
    built-in ones in ``judge.py`` honour the prompt, a user's may ignore it).
    """
    if config.judge.enabled:
        official = meta.get("judge_prompt")
        messages = judge_messages(
            prediction, truth, meta.get("question"), prompt=config.judge.prompt, official=official
        )
        # an official prompt's reply is read in its own format, ours in reward.judge.verdict
        reply_format = (meta.get("judge_reply") or "judgement") if official else None
        return ask_judge(config.judge, messages, reply_format)
    fn = load_callable(str(config.llm_judge))
    try:
        return float(fn(prediction, truth, **meta))
    except Exception as error:  # a judge that raised gave no verdict: not a 0
        raise JudgeFailed(f"judge {config.llm_judge} raised {type(error).__name__}: {error}") from error


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
    if res.get("judge_error"):  # the endpoint judge gave no verdict: not scored, with the reason
        return not_scored(str(res["judge_error"]), res.get("prediction"))
    if task in JUDGE_TASKS and res.get("error"):  # a callable judge that raised: no verdict either
        return not_scored(f"judge failed: {res['error']}", res.get("prediction"))
    out = {k: v for k, v in res.items() if k not in ("prediction",)}
    out["extracted"] = res.get("prediction")
    out["prediction"] = res.get("prediction")
    if task in JUDGE_TASKS:
        out["scored"] = True
    return out
