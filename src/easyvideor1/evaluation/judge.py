"""LLM judges for open-ended answers (off by default).

Enable one through the reward config, e.g.
``reward.llm_judge=easyvideor1.evaluation.judge:openai_judge`` with ``EASYVIDEOR1_JUDGE_URL``
(an OpenAI-compatible ``/v1/chat/completions`` endpoint, which applies the judge model's chat
template server-side) and ``EASYVIDEOR1_JUDGE_MODEL``; or ``...judge:local_judge`` with
``EASYVIDEOR1_JUDGE_MODEL`` naming a local Hugging Face model directory (its chat template is
applied here). The judge answers "Judgement: 1" or "Judgement: 0"; anything else scores 0 and
is counted as a judge failure.

A benchmark with an official judge prompt passes it as ``judge_prompt`` (sent as the only
message, as the official code does) with ``judge_reply="correct"`` (the reply is "Correct" or
"Incorrect", VideoReasonBench) or ``"judgement"`` (the default format above).
"""

from __future__ import annotations

import functools
import json
import os
import re
import urllib.request

from ..rollout.sampling import JUDGE_MAX_NEW_TOKENS

SYSTEM = "You grade answers to questions about videos. Be strict about meaning, lenient about wording."
TEMPLATE = (
    "Does the model answer mean the same as the ground truth?\n"
    "Ground truth: {truth}\nModel answer: {prediction}\n"
    "Give one short sentence of reasoning, then a last line exactly 'Judgement: 1' (same meaning) or "
    "'Judgement: 0' (different)."
)
_VERDICT = re.compile(r"judgement\s*:\s*([01])\b", re.I)
failures = {"unparsable": 0}


def parse_judgement(text: str) -> float | None:
    """The last 'Judgement: 0/1' in the judge's reply, or None."""
    found = _VERDICT.findall(text or "")
    return float(found[-1]) if found else None


def parse_correct(text: str) -> float | None:
    """1 for a reply that says "Correct", 0 for "Incorrect", None for anything else."""
    words = re.findall(r"[a-z]+", (text or "").lower())
    if words[:1] == ["correct"]:
        return 1.0
    if words[:1] == ["incorrect"]:
        return 0.0
    return None


def _messages(prediction: str, truth: str, meta: dict | None = None) -> list[dict[str, str]]:
    if meta and meta.get("judge_prompt"):
        return [{"role": "user", "content": str(meta["judge_prompt"])}]
    user = TEMPLATE.format(truth=truth, prediction=prediction)
    if meta and meta.get("question"):  # the question disambiguates short answers
        user = f"Question: {meta['question']}\n{user}"
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def _verdict(reply: str, meta: dict | None = None) -> float:
    parse = parse_correct if (meta or {}).get("judge_reply") == "correct" else parse_judgement
    verdict = parse(reply)
    if verdict is None:
        failures["unparsable"] += 1
        return 0.0
    return verdict


def openai_judge(prediction: str, truth: str, **meta) -> float:
    url = os.environ.get("EASYVIDEOR1_JUDGE_URL")
    if not url:
        raise RuntimeError("set EASYVIDEOR1_JUDGE_URL to an OpenAI-compatible /v1/chat/completions endpoint")
    body = json.dumps(
        {
            "model": os.environ.get("EASYVIDEOR1_JUDGE_MODEL", "judge"),
            "messages": _messages(prediction, truth, meta),
            "temperature": 0.0,
            "max_tokens": 256,
        }
    ).encode()
    headers = {"Content-Type": "application/json"}
    if os.environ.get("EASYVIDEOR1_JUDGE_KEY"):
        headers["Authorization"] = f"Bearer {os.environ['EASYVIDEOR1_JUDGE_KEY']}"
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    with urllib.request.urlopen(
        request, timeout=float(os.environ.get("EASYVIDEOR1_JUDGE_TIMEOUT", "60"))
    ) as r:
        reply = json.loads(r.read())["choices"][0]["message"]["content"]
    return _verdict(reply, meta)


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

    model, tokenizer = _local(os.environ["EASYVIDEOR1_JUDGE_MODEL"])
    prompt = tokenizer.apply_chat_template(
        _messages(prediction, truth, meta), tokenize=False, add_generation_prompt=True
    )
    ids = tokenizer(prompt, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=JUDGE_MAX_NEW_TOKENS, do_sample=False)
    return _verdict(tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True), meta)
