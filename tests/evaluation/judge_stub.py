"""A deterministic stand-in for an LLM judge (``reward.llm_judge=<this file>:judge``): right when the
answer equals the ground truth after case, space and end-punctuation normalisation. Every call is
recorded so tests can check what a benchmark sent (question, official judge prompt)."""

from __future__ import annotations

calls: list[dict] = []


def _norm(text: str) -> str:
    return " ".join(str(text).casefold().split()).rstrip(".")


def judge(prediction: str, truth: str, **meta) -> float:
    calls.append({"prediction": prediction, "truth": truth, **meta})
    return float(_norm(prediction) == _norm(truth))
