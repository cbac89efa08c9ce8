"""VideoReasonBench: the question as its own prompt, the answer after "Final Answer", a judge's verdict.

Source: github.com/llyx97/video_reason_bench, ``vlmevalkit/vlmeval/dataset/video_reasoning_bench.py``
(``build_prompt``: the video, then the question text, nothing added; every question ends "Provide a
summary of the final answer after 'Final Answer:'") and ``.../utils/video_reasoning_bench.py``
(``extract_final_answer``: the text after "Final Answer" to the end of the response, all its
lines; a response without it is rated 0; otherwise an LLM judge (GPT-4o, temperature 0) reads the
question, the extracted answer and the ground truth and answers "Correct" or "Incorrect").

So the metric is judge-based. Here the extraction takes the text after the last "Final Answer"
(any case; the official regex takes the first, case-sensitive: the same on responses that say it
once). Without a judge a sample is not scored; ``final_answer_found`` and ``exact_match`` (every
line of the answer equal to the ground truth's, after case/space normalisation) are proxies.
The 120 operation-prediction questions ("what sequence of moves reaches ...") have no ground-truth
answer ("None"): officially the judge extracts the moves and the benchmark's hidden state
sequences (not in the unified file) are replayed, so they are reported as not scored.
"""

from __future__ import annotations

import re
from typing import Any

from ...data.prompt import check_style
from ...data.records import Record
from ...rewards import RewardConfig
from ...rewards.parsing import answer_tag_contents, normalize_text, parse_ground_truth, strip_think
from ..scoring import NO_JUDGE, JudgeFailed, call_judge, has_judge, judged, not_scored

SOURCE = (
    "https://github.com/llyx97/video_reason_bench (vlmevalkit/vlmeval/dataset/video_reasoning_bench.py: "
    "the question as is; utils/video_reasoning_bench.py: text after 'Final Answer', judged Correct/Incorrect)"
)
NO_GROUND_TRUTH = (
    "operation prediction: the official metric replays the answer's moves on the benchmark's hidden "
    "states, which the unified file does not carry"
)
_FINAL = re.compile(r"final\s+answer", re.IGNORECASE)
_LEAD = re.compile(r"^[\s*_:：#]+")


def build_prompt(record: Record, style: str) -> str:
    """The question exactly as the benchmark wrote it: it carries its own answer format ('Final
    Answer:'), so nothing is appended in either style (the question already asks to reason first)."""
    check_style(style)
    return record.problem


def final_answer(response: str) -> str | None:
    """Everything after the last "Final Answer" (all lines), or None when the response has none."""
    body = strip_think(response or "")
    matches = list(_FINAL.finditer(body))
    if not matches:
        return None
    rest = _LEAD.sub("", body[matches[-1].end() :]).strip()
    tags = answer_tag_contents(rest)
    if tags:
        rest = tags[-1]
    rest = rest.replace("**", "").strip()
    return rest or None


def _lines(text: str) -> list[str]:
    return [normalize_text(line).rstrip(".") for line in text.strip().splitlines() if line.strip()]


def judge_prompt(question: str, response: str, ground_truth: str) -> str:
    """The official judge prompt (``get_judge_prompt``)."""
    return (
        "You will be given a question, a model response and a ground-truth answer. Your task is to "
        "determine whether the model response is correct based on the ground-truth answer.\n\n"
        f"Question:\n{question}\n\nModel Response:\n{response}\n\nGround-Truth Answer:\n{ground_truth}\n\n"
        "NOTE: The model response should contain all information in the ground-truth answer. Directly "
        'output "Correct" or "Incorrect":\n'
    )


def score(
    record: Record, response: str, config: RewardConfig | None, response_length: int | None
) -> dict[str, Any]:
    truth = parse_ground_truth(record.answer).strip()
    answer = final_answer(response)
    proxies = {
        "final_answer_found": float(answer is not None),
        "exact_match": float(answer is not None and _lines(answer) == _lines(truth)),
    }
    if truth.lower() in ("", "none"):
        return not_scored(NO_GROUND_TRUTH, answer, **proxies)
    if not has_judge(config):
        return not_scored(NO_JUDGE, answer, **proxies)
    if answer is None:  # officially rated 0 without asking the judge
        return judged(0.0, None, **proxies)
    try:
        verdict = call_judge(
            config,
            answer,
            truth,
            question=record.problem,
            benchmark="videoreasonbench",
            judge_prompt=judge_prompt(record.problem, answer, truth),
            judge_reply="correct",
        )
    except JudgeFailed as failure:
        return not_scored(str(failure), answer, **proxies)
    return judged(verdict, answer, **proxies)
