"""Rewards scored by an endpoint judge (``reward.judge``) against a real grading server on
localhost: the verdict is the accuracy, a failed request is unscored (or rule-scored), identical
answers are asked once, and evaluation reports a failure as not scored with its reason."""

from __future__ import annotations

import pytest

from easyvideor1.data.records import Record
from easyvideor1.evaluation import get_benchmark
from easyvideor1.evaluation.scoring import score_generic
from easyvideor1.rewards import RewardConfig, score_records
from easyvideor1.rewards.judge_scoring import judge_messages, parse_judgement
from tests.evaluation.benchmark_cases import gold_response, write_unshipped
from tests.grading_server import GradingServer
from tests.json_server import JSONServer, chat_reply


@pytest.fixture
def server():
    s = GradingServer(fail_marker="BROKEN")
    yield s
    s.close()


def _record(
    answer: str, problem_type: str = "open-ended", problem: str = "What colour is the square?"
) -> Record:
    return Record(problem=problem, answer=answer, problem_type=problem_type, problem_id=f"r-{answer}")


def _cfg(server, **judge) -> RewardConfig:
    return RewardConfig(judge={"url": server.url, "retries": 0, **judge})


def test_the_verdict_is_the_accuracy_and_a_failure_is_unscored(server):
    cfg = _cfg(server)
    texts = ["<answer>red</answer>", "<answer>blue</answer>", "<answer>BROKEN</answer>", "no tag at all"]
    rows = score_records(texts, [_record("red")] * 4, [5] * 4, cfg)
    right, wrong, broken, untagged = rows
    assert right["accuracy"] == 1.0 and right["judge"] == 1.0
    assert right["overall"] == pytest.approx(0.9 * 1.0 + 0.1 * right["format"])
    assert wrong["accuracy"] == 0.0 and wrong["judge"] == 0.0
    assert broken["unscored"] is True and "HTTP 500" in broken["judge_error"]
    assert untagged["format"] == 0.0  # read from the text, judged like any other answer
    sent = [text for _, text in server.arrivals]
    assert len(sent) == 4 and all(t.startswith("Question: What colour is the square?\n") for t in sent)


def test_on_failure_rule_keeps_the_rule_score(server):
    (row,) = score_records(
        ["<answer>BROKEN red</answer>"], [_record("red")], [5], _cfg(server, on_failure="rule")
    )
    assert "unscored" not in row and row["judge_error"]
    assert 0.0 < row["accuracy"] < 1.0  # ROUGE of "BROKEN red" against "red"


def test_identical_answers_of_a_group_are_asked_once(server):
    rows = score_records(["<answer>red</answer>"] * 6, [_record("red")] * 6, [5] * 6, _cfg(server))
    assert [r["accuracy"] for r in rows] == [1.0] * 6 and len(server.arrivals) == 1


def test_a_generative_reward_model_for_any_task(server):
    cfg = _cfg(server, tasks=["open_ended", "numerical"])
    rows = score_records(
        ["<answer>3.5</answer>", "<answer>4</answer>"], [_record("3.5", "numerical")] * 2, [3, 3], cfg
    )
    assert [r["judge"] for r in rows] == [1.0, 0.0] and len(server.arrivals) == 2


def test_evaluation_reports_a_failed_judge_as_not_scored(server):
    cfg = _cfg(server)
    ok = score_generic(_record("red"), "<answer>red</answer>", cfg, 5)
    failed = score_generic(_record("red"), "<answer>BROKEN</answer>", cfg, 5)
    assert ok["scored"] is True and ok["accuracy"] == 1.0
    assert (
        failed["scored"] is False and "HTTP 500" in failed["not_scored_reason"] and "accuracy" not in failed
    )


def test_videoreasonbench_official_prompt_through_the_endpoint(server, tmp_path):
    spec = get_benchmark("videoreasonbench")
    write_unshipped("videoreasonbench", spec.annotation, tmp_path)
    rec = spec.load(str(tmp_path))[0]
    cfg = _cfg(server)
    right = spec.score_response(rec, gold_response("videoreasonbench", rec), reward_config=cfg)
    broken = spec.score_response(rec, "Final Answer: BROKEN", reward_config=cfg)
    assert right["scored"] and right["accuracy"] == 1.0
    assert broken["scored"] is False and "judge request failed" in broken["not_scored_reason"]
    first = server.arrivals[0][1]
    assert first.startswith("You will be given a question, a model response and a ground")


def test_prompt_template_and_fractional_verdicts():
    messages = judge_messages("red", "red", "Which?", prompt="Q: {question} A: {prediction} T: {truth}")
    assert messages == [{"role": "user", "content": "Q: Which? A: red T: red"}]
    assert parse_judgement("Judgement: 0.75") == 0.75 and parse_judgement("Judgement: 2") is None


@pytest.mark.parametrize(
    "verdict,prompt,reply,accuracy",
    [
        ("default", "", "Judgement: 1/2", None),  # no verdict: the failure path, never a score
        ("default", "", "Judgement: 1e-9", None),
        ("yes_no", "Is {prediction} the same as {truth}? Answer Yes or No.", "Yes, both say red.", 1.0),
        ("score_0_10", "Rate {prediction} against {truth} as 'Score: N' (0-10).", "Score: 6/10", 0.6),
    ],
)
def test_the_verdict_format_decides_what_is_a_score(verdict, prompt, reply, accuracy):
    server = JSONServer(lambda body: (200, chat_reply(reply), {}))
    cfg = RewardConfig(judge={"url": server.url, "retries": 0, "verdict": verdict, "prompt": prompt})
    (row,) = score_records(["<answer>red</answer>"], [_record(f"red-{verdict}")], [5], cfg)
    evaluated = score_generic(_record(f"red-{verdict}"), "<answer>red</answer>", cfg, 5)
    server.close()
    if accuracy is None:
        assert row["unscored"] is True and "judge reply has no verdict" in row["judge_error"]
        assert evaluated["scored"] is False and "no verdict" in evaluated["not_scored_reason"]
    else:
        assert row["accuracy"] == row["judge"] == accuracy and "judge_error" not in row
        assert evaluated["scored"] is True and evaluated["accuracy"] == accuracy


def test_both_judges_at_once_is_refused(server):
    with pytest.raises(ValueError, match="reward.llm_judge and reward.judge.url"):
        RewardConfig(llm_judge="x.py:f", judge={"url": server.url})


def test_judge_tasks_accept_any_spelling_and_refuse_unknown_names(server):
    from easyvideor1.rewards import UnknownTaskError, validate_problem_types

    cfg = _cfg(server, tasks=["open-ended", "Numerical"])  # spellings the registry accepts
    rows = score_records(["<answer>3.5</answer>"], [_record("3.5", "numerical")], [3], cfg)
    assert rows[0]["judge"] == 1.0 and len(server.arrivals) == 1
    with pytest.raises(
        UnknownTaskError, match=r"reward.judge.tasks: unknown problem_type 'opne_ended' \(did you mean"
    ):
        validate_problem_types(["open-ended"], _cfg(server, tasks=["opne_ended"]))
