"""OCR: 1 - normalised edit distance, per word for spaced scripts and per character for CJK."""

from __future__ import annotations

from easyvideor1.rewards.parsing import clean_short_answer
from easyvideor1.rewards.registry import register_task
from easyvideor1.rewards.sample import Sample, TaskScore
from easyvideor1.rewards.text_metrics import edit_similarity


@register_task(
    "ocr",
    aliases=("text recognition", "scene text"),
    instruction="Give the text inside <answer></answer>.",
)
def score_ocr(sample: Sample) -> TaskScore:
    """Token-level edit similarity of the stated text to the ground truth (case-insensitive)."""
    answer = sample.answer
    if answer.text is None or answer.ambiguous:
        return TaskScore(0.0, None, None)
    predicted = clean_short_answer(answer.text)  # the same light cleaning on both sides
    return TaskScore(edit_similarity(predicted, clean_short_answer(sample.truth)), None, predicted)
