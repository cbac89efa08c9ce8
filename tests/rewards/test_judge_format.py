"""The verdict grammar of ``reward.judge.verdict``: each format reads whole verdicts only, in its
own place of the reply, and refuses what only looks like one."""

from __future__ import annotations

import pytest

from easyvideor1.rewards.judge_format import OFFICIAL_REPLIES, verdict_format


@pytest.mark.parametrize(
    "form,reply,expected",
    [
        ("default", "Same meaning.\nJudgement: 1", 1.0),
        ("default", "Judgement: **0**.", 0.0),
        ("default", "Judgement: 0.75", 0.75),
        ("default", "Judgement: 1 ... Judgement: 0", 0.0),  # the last one
        ("default", "Judgement: 1/2", None),
        ("default", "Judgement: 1e-9", None),
        ("default", "Judgement: 0,9", None),
        ("default", "Judgement: 2", None),
        ("default", "Judgement: 1\nJudgement: 1/2", None),  # the last one is no verdict
        ("default", "Judgement: yes", None),
        ("yes_no", "Yes.", 1.0),
        ("yes_no", "**No**, the colour differs", 0.0),
        ("yes_no", "Yesterday it was", None),
        ("yes_no", "Judgement: 1", None),
        ("score_0_10", "Fine.\nScore: 7/10", 0.7),
        ("score_0_10", "Score: 8.5", 0.85),
        ("score_0_10", "Score: 11", None),
        ("score_0_10", "Score: 7/9", None),
        (r"Verdict=(\S+)", "Verdict=0.5", 0.5),
        (r"Verdict=(\S+)", "Verdict=YES", 1.0),
        (r"Verdict=(\S+)", "Verdict=1e-9", None),
        (r"Verdict=(\S+)", "no verdict here", None),
        (r"Verdict=(\d)?", "Verdict=", None),  # a group that took part in no match
    ],
)
def test_verdict_formats_read_whole_verdicts_only(form, reply, expected):
    assert verdict_format(form).read(reply) == expected


def test_official_reply_formats():
    assert OFFICIAL_REPLIES["correct"].read("**Correct**") == 1.0
    assert OFFICIAL_REPLIES["correct"].read("Incorrect.") == 0.0
    assert OFFICIAL_REPLIES["judgement"] is verdict_format("default")
