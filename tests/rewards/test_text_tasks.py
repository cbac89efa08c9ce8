"""OCR, open-ended (ROUGE, judge hook), boolean and preference tasks."""

from __future__ import annotations

import pytest
from rouge_score import rouge_scorer

from easyvideor1.rewards import RewardConfig
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
    ("response", "accuracy"),
    [("<answer>STOP AHEAD</answer>", 1.0), ("The answer is: stop ahead", 1.0), ("The sign reads: stop ahead", 0.0), ("<answer>stop</answer>", 0.5), ("", 0.0)],
)
def test_ocr(score, response: str, accuracy: float) -> None:
    assert score(response, "<answer>Stop ahead</answer>", "OCR")["accuracy"] == pytest.approx(accuracy)


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


@pytest.mark.parametrize(
    ("response", "truth", "accuracy"),
    [
        ("<answer>Dolly Zoom</answer>", "<answer>Dolly Zoom</answer>", 1.0),
        ("<answer>dolly zoom.</answer>", "<answer>Dolly Zoom</answer>", 1.0),
        ("<answer>El Niño</answer>", "<answer>El Niño</answer>", 1.0),
        ("<answer>北京</answer>", "北京", 1.0),
        ("<answer>a cat</answer>", "a dog", 1 / 3),  # rouge1 0.5, rouge2 0, rougeL 0.5
        ("<answer>something else</answer>", "Dolly Zoom", 0.0),
        ("<answer></answer>", "Dolly Zoom", 0.0),
        ("", "Dolly Zoom", 0.0),
    ],
)
def test_open_ended(score, response: str, truth: str, accuracy: float) -> None:
    assert score(response, truth, "open-ended")["accuracy"] == pytest.approx(accuracy)


def test_open_ended_judge_hook(score, tmp_path) -> None:
    judge = tmp_path / "judge.py"
    judge.write_text("def judge(prediction, ground_truth, **record):\n    return 1.0 if 'zoom' in prediction.lower() else 0.0\n")
    config = RewardConfig(strict=True, llm_judge=f"{judge}:judge")
    assert score("<answer>a vertigo zoom</answer>", "Dolly Zoom", "video qa", config=config)["accuracy"] == 1.0
    assert score("<answer>a pan</answer>", "Dolly Zoom", "video qa", config=config)["accuracy"] == 0.0
    assert RewardConfig().llm_judge is None  # off by default


@pytest.mark.parametrize(
    ("response", "truth", "accuracy", "format_score"),
    [
        ("<answer>Yes</answer>", "<answer>Yes</answer>", 1.0, 1.0),
        ("<answer>yes.</answer>", "yes", 1.0, 1.0),
        ("<answer>True</answer>", "Yes", 1.0, 1.0),
        ("<answer>No</answer>", "yes", 0.0, 1.0),
        ("<answer>false</answer>", "No", 1.0, 1.0),
        ("<answer>Yes, he is running</answer>", "yes", 1.0, 1.0),
        ("<answer>Yes and no</answer>", "yes", 0.0, 0.5),
        ("<answer>I KNOW</answer>", "no", 0.0, 0.5),  # "NO" inside "KNOW" is not an answer
        ("<answer>Y</answer>", "yes", 1.0, 1.0),
        ("<answer>是</answer>", "yes", 1.0, 1.0),
        ("<answer>不是</answer>", "no", 1.0, 1.0),
        ("Yes, the person is still cooking.", "yes", 1.0, 0.0),
        ("The person is not cooking, no doubt, yes.", "yes", 0.0, 0.0),  # free text: first word only
        ("Therefore, the final answer is: NO", "no", 1.0, 0.0),
        ("", "no", 0.0, 0.0),
        ("<answer>Yes</answer>", "1", 1.0, 1.0),
    ],
)
def test_boolean(score, response: str, truth: str, accuracy: float, format_score: float) -> None:
    result = score(response, truth, "binary classification")
    assert (result["accuracy"], result["format"]) == (accuracy, format_score)


@pytest.mark.parametrize("problem_type", ["SSR", "CRR", "boolean"])
def test_ovo_bench_yes_no_types(score, problem_type: str) -> None:
    assert score("<answer>YES</answer>", "<answer>Yes</answer>", problem_type)["accuracy"] == 1.0


@pytest.mark.parametrize(
    ("response", "truth", "accuracy"),
    [
        ("<answer>Response 1</answer>", "Response 1", 1.0),
        ("<answer>**response 2**.</answer>", "<answer>Response 2</answer>", 1.0),
        ("<answer>Tie</answer>", "tie", 1.0),
        ("<answer>Response 1</answer>", "2", 0.0),
        ("<answer>Response 1 is worse than Response 2</answer>", "Response 1", 0.0),  # strict
        ("<answer>Response 1 or Response 2</answer>", "Response 2", 0.0),
        ("<answer>1</answer>", "Response 1", 0.0),
        ("Therefore, the final answer is: Response 2", "Response 2", 1.0),
        ("", "tie", 0.0),
    ],
)
def test_preference(score, response: str, truth: str, accuracy: float) -> None:
    assert score(response, truth, "llava")["accuracy"] == accuracy
