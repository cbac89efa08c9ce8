"""Open-ended answers (free-form, video QA, captions): mean ROUGE-1/2/L F1, or an LLM judge.

The judge is off by default; `RewardConfig.llm_judge = "file.py:fn"` makes `fn(prediction,
ground_truth, **record)` (a score in [0, 1]) the accuracy instead of ROUGE.
"""

from __future__ import annotations

from easyvideor1.rewards.parsing import clean_short_answer, normalize_text
from easyvideor1.rewards.registry import load_callable, register_task
from easyvideor1.rewards.sample import Sample, TaskScore
from easyvideor1.rewards.text_metrics import rouge_scores


@register_task(
    "open_ended",
    aliases=(
        "open-ended",
        "open ended",
        "free-form",
        "free form",
        "video qa",
        "video description",
        "caption",
        "captioning",
        "short answer",
    ),
    instruction="Give the final answer inside <answer></answer>.",
)
def score_open_ended(sample: Sample) -> TaskScore:
    """Mean of ROUGE-1, ROUGE-2 and ROUGE-L F1 (1.0 for a normalised exact match)."""
    answer = sample.answer
    if answer.text is None or answer.ambiguous:
        return TaskScore(0.0, None, None)
    # Both sides get the same light cleaning (boxed, `$`, markdown, quotes, end punctuation).
    predicted, truth = clean_short_answer(answer.text), clean_short_answer(sample.truth)
    if not predicted:
        return TaskScore(0.0, None, None)
    if sample.config.llm_judge:
        judge = load_callable(sample.config.llm_judge)
        verdict = float(judge(predicted, truth, **dict(sample.meta)))
        return TaskScore(min(1.0, max(0.0, verdict)), None, predicted, {"judge": verdict})
    if normalize_text(predicted) == normalize_text(truth):
        return TaskScore(1.0, None, predicted, {"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0})
    scores = rouge_scores(predicted, truth)
    return TaskScore(sum(scores.values()) / len(scores), None, predicted, scores)
