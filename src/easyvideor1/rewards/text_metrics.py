"""Text similarity for OCR (edit distance) and open-ended answers (ROUGE), CJK-aware.

`rouge_score`'s tokenizer keeps only ASCII letters and digits, so a Chinese answer scores 0 against
itself. Here scripts written without spaces (CJK ideographs, kana, Thai, ...) are tokenised per
character and every other script per word, in Unicode. ROUGE-1/2/L F1 are computed directly
(ROUGE-L through rapidfuzz's C++ LCS, so long responses stay fast); on ASCII text the numbers equal
`rouge_score`'s with its Porter stemmer (tested).
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from typing import Any

from rapidfuzz.distance import LCSseq, Levenshtein

from easyvideor1.rewards.parsing import normalize_text

# Scripts written without spaces between words: one token per character.
_UNSPACED = (
    "\u0e00-\u0eff"  # Thai, Lao
    "\u1000-\u109f"  # Myanmar
    "\u1780-\u17ff"  # Khmer
    "\u3040-\u30ff"  # Hiragana, Katakana
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # CJK ideographs
    "\U00020000-\U0002ffff"
)
_EDIT_TOKEN_RE = re.compile(rf"[{_UNSPACED}]|[^\s{_UNSPACED}]+")
_ROUGE_TOKEN_RE = re.compile(rf"[{_UNSPACED}]|[^\W_{_UNSPACED}]+")
_STEM_MIN_LENGTH = 4  # rouge_score stems tokens longer than 3 characters


def edit_tokens(text: str) -> list[str]:
    """Tokens for OCR edit distance: case-folded words, punctuation kept, one per unspaced character."""
    return _EDIT_TOKEN_RE.findall(normalize_text(text))


def edit_similarity(prediction: str, reference: str) -> float:
    """1 - (token edit distance / reference length), clipped to [0, 1] (1 - WER for spaced scripts)."""
    predicted, expected = edit_tokens(prediction), edit_tokens(reference)
    if not expected:
        return 1.0 if not predicted else 0.0
    return max(0.0, 1.0 - Levenshtein.distance(predicted, expected) / len(expected))


@lru_cache(maxsize=1)
def _stemmer() -> Any:
    from nltk.stem import porter  # imported lazily: nltk is slow to import

    return porter.PorterStemmer()


@lru_cache(maxsize=65536)
def _stem(token: str) -> str:
    if len(token) >= _STEM_MIN_LENGTH and token.isascii() and token.isalpha():
        return _stemmer().stem(token)
    return token


def rouge_tokens(text: str) -> list[str]:
    """Tokens for ROUGE: lower-case Unicode words (Porter-stemmed if ASCII), one per unspaced character."""
    return [_stem(token) for token in _ROUGE_TOKEN_RE.findall(normalize_text(text))]


def _f1(overlap: float, predicted: int, expected: int) -> float:
    if overlap <= 0 or predicted == 0 or expected == 0:
        return 0.0
    precision, recall = overlap / predicted, overlap / expected
    return 2 * precision * recall / (precision + recall)


def _ngram_f1(predicted: list[str], expected: list[str], n: int) -> float:
    predicted_grams = Counter(zip(*(predicted[i:] for i in range(n)), strict=False))
    expected_grams = Counter(zip(*(expected[i:] for i in range(n)), strict=False))
    overlap = sum((predicted_grams & expected_grams).values())
    return _f1(overlap, sum(predicted_grams.values()), sum(expected_grams.values()))


def rouge_scores(prediction: str, reference: str) -> dict[str, float]:
    """ROUGE-1, ROUGE-2 and ROUGE-L F1 of `prediction` against `reference`."""
    predicted, expected = rouge_tokens(prediction), rouge_tokens(reference)
    lcs = LCSseq.similarity(predicted, expected) if predicted and expected else 0
    return {
        "rouge1": _ngram_f1(predicted, expected, 1),
        "rouge2": _ngram_f1(predicted, expected, 2),
        "rougeL": _f1(lcs, len(predicted), len(expected)),
    }
