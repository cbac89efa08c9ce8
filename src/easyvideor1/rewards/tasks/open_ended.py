"""Open-ended answers (free-form, video QA, captions): mean ROUGE-1/2/L F1, or an LLM judge.

The judge is off by default. An endpoint judge (``reward.judge.url``) replaces the accuracy after
this rule has read the answer (``rewards/judge_scoring.py``); a callable,
`RewardConfig.llm_judge = "file.py:fn"`, makes `fn(prediction, ground_truth, **record)` (a score
in [0, 1]) the accuracy here. A callable that raises gives no verdict: with
``reward.judge.on_failure=rule`` the answer keeps its ROUGE score, else the sample is unscored.
"""

from __future__ import annotations

from easyvideor1.rewards.judge_scoring import JudgeFailed
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
    failed = None
    if sample.config.llm_judge:
        judge = load_callable(sample.config.llm_judge)
        try:
            verdict = float(judge(predicted, truth, **dict(sample.meta)))
        except Exception as error:
            failed = (
                error if isinstance(error, JudgeFailed) else JudgeFailed(f"{type(error).__name__}: {error}")
            )
            if sample.config.judge.on_failure != "rule":
                raise failed from error
        else:
            return TaskScore(min(1.0, max(0.0, verdict)), None, predicted, {"judge": verdict})
    rule = _rouge(predicted, truth)
    if failed is not None:
        return TaskScore(rule.accuracy, None, predicted, {**rule.details, "judge_error": str(failed)})
    return rule


def _rouge(predicted: str, truth: str) -> TaskScore:
    if normalize_text(predicted) == normalize_text(truth):
        return TaskScore(1.0, None, predicted, {"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0})
    scores = rouge_scores(predicted, truth)
    return TaskScore(sum(scores.values()) / len(scores), None, predicted, scores)
