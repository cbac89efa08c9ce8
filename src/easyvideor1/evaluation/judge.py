"""Callable LLM judges for ``reward.llm_judge`` (off by default), built on the endpoint client.

Prefer the endpoint settings (``reward.judge.url``, ``rewards/judge.py``): concurrent, retried,
cached. These callables remain for runs configured through environment variables:
``reward.llm_judge=easyvideor1.evaluation.judge:openai_judge`` with ``EASYVIDEOR1_JUDGE_URL`` (an
OpenAI-compatible endpoint), ``EASYVIDEOR1_JUDGE_MODEL`` and optionally ``EASYVIDEOR1_JUDGE_KEY``
and ``EASYVIDEOR1_JUDGE_TIMEOUT``; or ``...judge:local_judge`` with ``EASYVIDEOR1_JUDGE_MODEL``
naming a local Hugging Face model directory (its chat template is applied here, one answer at
a time). The prompt and the reply formats are the endpoint judge's (``rewards/judge_scoring.py``).
A reply with no verdict raises :class:`~easyvideor1.rewards.judge_scoring.JudgeFailed` (counted in
``failures``): the sample is not scored, never given a 0.

A benchmark with an official judge prompt passes it as ``judge_prompt`` (sent as the only
message, as the official code does) with ``judge_reply="correct"`` (the reply is "Correct" or
"Incorrect", VideoReasonBench) or ``"judgement"`` (the default format).
"""

from __future__ import annotations

import functools
import os

from ..rewards.judge import JudgeConfig, JudgeReply
from ..rewards.judge_scoring import JudgeFailed, ask_judge, judge_messages, parse_correct, parse_judgement
from ..rollout.sampling import JUDGE_MAX_NEW_TOKENS

__all__ = ["failures", "local_judge", "openai_judge", "parse_correct", "parse_judgement"]
failures = {"unparsable": 0}


def _messages(prediction: str, truth: str, meta: dict | None = None) -> list[dict[str, str]]:
    meta = meta or {}
    return judge_messages(prediction, truth, meta.get("question"), official=meta.get("judge_prompt"))


def _reply_format(meta: dict) -> str:
    return "correct" if meta.get("judge_reply") == "correct" else "judgement"


def _env_config() -> JudgeConfig:
    url = os.environ.get("EASYVIDEOR1_JUDGE_URL")
    if not url:
        raise JudgeFailed("set EASYVIDEOR1_JUDGE_URL to an OpenAI-compatible /v1/chat/completions endpoint")
    return JudgeConfig(
        url=url,
        model=os.environ.get("EASYVIDEOR1_JUDGE_MODEL", "judge"),
        api_key_env="EASYVIDEOR1_JUDGE_KEY" if os.environ.get("EASYVIDEOR1_JUDGE_KEY") else "",
        timeout_s=float(os.environ.get("EASYVIDEOR1_JUDGE_TIMEOUT", "60")),
    )


def _counted(call):
    try:
        return call()
    except JudgeFailed as failure:
        if "no verdict" in str(failure):
            failures["unparsable"] += 1
        raise


def openai_judge(prediction: str, truth: str, **meta) -> float:
    cfg = _env_config()
    return _counted(lambda: ask_judge(cfg, _messages(prediction, truth, meta), _reply_format(meta)))


@functools.lru_cache(maxsize=1)
def _local(path: str):
    from transformers import AutoModelForCausalLM, AutoModelForImageTextToText, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(path)
    except (ValueError, KeyError):
        model = AutoModelForImageTextToText.from_pretrained(path)
    return model.eval(), tokenizer


def local_judge(prediction: str, truth: str, **meta) -> float:
    import torch

    from ..rewards.judge_scoring import verdict

    model, tokenizer = _local(os.environ["EASYVIDEOR1_JUDGE_MODEL"])
    prompt = tokenizer.apply_chat_template(
        _messages(prediction, truth, meta), tokenize=False, add_generation_prompt=True
    )
    ids = tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=JUDGE_MAX_NEW_TOKENS, do_sample=False)
    text = tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
    return _counted(lambda: verdict(JudgeReply(text), _reply_format(meta)))
