"""Edit distance and ROUGE: CJK-aware tokenisation, parity with rouge_score on ASCII."""

from __future__ import annotations

import pytest
from rouge_score import rouge_scorer

from easyvideor1.rewards.text_metrics import edit_similarity, edit_tokens, rouge_scores, rouge_tokens


@pytest.mark.parametrize(
    ("prediction", "reference", "expected"),
    [
        ("STOP AHEAD", "stop ahead", 1.0),
        ("stop", "stop ahead", 0.5),
        ("stop ahead now", "stop ahead", 0.5),
        ("go", "stop ahead", 0.0),
        ("", "stop ahead", 0.0),
        ("", "", 1.0),
        ("x", "", 0.0),
        ("北京欢迎你", "北京欢迎你", 1.0),
        ("北京欢迎", "北京欢迎你", 0.8),  # CJK: per character
        ("Exit 12 北京", "exit 12 北京", 1.0),
        ("café crème", "Café Crème", 1.0),
    ],
)
def test_edit_similarity(prediction: str, reference: str, expected: float) -> None:
    assert edit_similarity(prediction, reference) == pytest.approx(expected)


def test_edit_tokens_split_cjk_per_character() -> None:
    assert edit_tokens("Hello 世界!") == ["hello", "世", "界", "!"]


@pytest.mark.parametrize(
    ("prediction", "reference"),
    [
        ("the cat sat on the mat", "a cat was sitting on the mat"),
        ("Running dogs are running quickly", "the dog runs quick"),
        ("A man slices tomatoes in a kitchen", "a person is cutting vegetables in the kitchen"),
        ("completely different words", "nothing in common here"),
        ("The Dolly Zoom effect", "Dolly Zoom"),
    ],
)
def test_rouge_equals_rouge_score_on_ascii(prediction: str, reference: str) -> None:
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    expected = {name: value.fmeasure for name, value in scorer.score(reference, prediction).items()}
    ours = rouge_scores(prediction, reference)
    for name in expected:
        assert ours[name] == pytest.approx(expected[name])


def test_rouge_keeps_non_ascii() -> None:
    assert rouge_tokens("El Niño 天气") == ["el", "niño", "天", "气"]
    assert rouge_scores("今天天气很好", "今天天气很好")["rougeL"] == 1.0
    assert 0.0 < rouge_scores("今天天气好", "今天天气很好")["rouge1"] < 1.0
    assert rouge_scores("Ελληνικά κείμενα", "ελληνικά κείμενα")["rouge1"] == 1.0
