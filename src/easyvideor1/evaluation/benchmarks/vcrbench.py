"""VCR-Bench accuracy: multiple choice by letter, boxes and time spans by IoU, other answers by a judge.

Source: github.com/zhishuifeiqian/VCR-Bench, ``eval_code/eval.py`` (``match_answer``): GPT-4o first
extracts the final answer; an answer that is a time span ``[s, e]`` is right when its IoU with the
ground truth exceeds 0.7, a box ``[x1, y1, x2, y2]`` when its IoU exceeds 0.5; anything else is
compared by a GPT-4o consistency judge (1/0). ``cau_acc.py``: accuracy = right / all questions.
The official repository publishes no inference prompt (models answer the question in their own
way), so the prompt is the generic one.

Here multiple-choice letters are read by the reward library (what the judge checks against the
letter), spans and boxes are read from the response (the last bracketed list of 2 or 4 numbers,
preferring the ``<answer>`` tag) and scored by the official IoU thresholds, and the remaining
open-ended answers need a judge (``reward.judge.url`` or ``reward.llm_judge``) (without one they are not scored; ROUGE is a proxy).
"""

from __future__ import annotations

import re
from typing import Any

from ...data.records import Record
from ...rewards import RewardConfig
from ...rewards.parsing import answer_tag_contents, clean_short_answer, parse_ground_truth, strip_think
from ..scoring import JudgeFailed, call_judge, has_judge, judged, not_scored, score_generic

SOURCE = "generic prompt; scoring per https://github.com/zhishuifeiqian/VCR-Bench eval_code/eval.py"
SPAN_IOU, BOX_IOU = 0.7, 0.5
_NUM = r"-?\d+(?:\.\d+)?"
_LIST = re.compile(rf"\[\s*({_NUM}(?:\s*,\s*{_NUM})*)\s*\]")


def _numbers(text: str, n: int) -> list[float] | None:
    """The last bracketed list of exactly ``n`` numbers in ``text``."""
    found = [m.group(1) for m in _LIST.finditer(text)]
    for group in reversed(found):
        values = [float(v) for v in group.split(",")]
        if len(values) == n:
            return values
    return None


def _span_iou(a: list[float], b: list[float]) -> float:
    inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    union = max(a[1], b[1]) - min(a[0], b[0])
    return inter / union if union > 0 else 0.0


def _box_iou(a: list[float], b: list[float]) -> float:
    iw, ih = min(a[2], b[2]) - max(a[0], b[0]), min(a[3], b[3]) - max(a[1], b[1])
    if iw < 0 or ih < 0:
        return 0.0
    inter = iw * ih
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def geometric_truth(record: Record) -> list[float] | None:
    """The ground truth when it is a time span (2 numbers) or a box (4 numbers), else None."""
    truth = parse_ground_truth(record.answer).strip()
    if not re.fullmatch(_LIST.pattern, truth):
        return None
    values = [float(v) for v in truth.strip("[] ").split(",")]
    return values if len(values) in (2, 4) else None


def score(
    record: Record, response: str, config: RewardConfig | None, response_length: int | None
) -> dict[str, Any]:
    if record.options:
        return score_generic(record, response, config, response_length)
    gold = geometric_truth(record)
    if gold is not None:
        body = strip_think(response or "")
        tags = answer_tag_contents(body)
        predicted = _numbers(tags[-1] if tags else body, len(gold))
        if predicted is None:
            return {"scored": True, "accuracy": 0.0, "iou": 0.0, "extracted": None, "prediction": None}
        iou = _span_iou(predicted, gold) if len(gold) == 2 else _box_iou(predicted, gold)
        right = iou > (SPAN_IOU if len(gold) == 2 else BOX_IOU)
        text = "[" + ", ".join(f"{v:g}" for v in predicted) + "]"
        return {"scored": True, "accuracy": float(right), "iou": iou, "extracted": text, "prediction": text}
    if not has_judge(config):
        return score_generic(record, response, config, response_length)  # not scored, ROUGE proxy
    res = score_generic(record, response, RewardConfig(), response_length)  # the answer, read once
    answer = res.get("extracted")
    if answer is None:
        return judged(0.0, None)
    truth = clean_short_answer(parse_ground_truth(record.answer))  # cleaned like the answer
    try:
        verdict = call_judge(config, answer, truth, question=record.problem, benchmark="vcrbench")
    except JudgeFailed as failure:
        return not_scored(str(failure), answer)
    return judged(verdict, answer)
