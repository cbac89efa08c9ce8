"""``demo --distill``: the ratio it reports (by hand), and a short real run: a teacher trained and
exported, three cold-start students (GRPO, OPD from the teacher, RLSD with the policy shown the
answer), the report's keys, and the teacher reused on a second call instead of trained again.

Beside the trainer tests for their session fixture (``demo_assets``: the videos and the tiny model)."""

from __future__ import annotations

import json
import os

import pytest

from easyvideor1.demo import distill_ratio, distill_teacher, run_distill_demo

STEPS = "steps_to_0.9"
# one prompt pair per step, no validation between the first and the last
QUICK = [
    "trainer.prompts_per_step=2",
    "trainer.mini_batch_prompts=2",
    "rollout.n=2",
    "trainer.val_every=0",
    "trainer.val_size=4",
    "trainer.save_every=0",
    "trainer.loggers=[jsonl]",
    "data.prefetch=false",
]
STUDENTS = [*QUICK, "trainer.max_steps=1"]
TEACHER = [*QUICK, "trainer.max_steps=1", "trainer.sft_warmup_steps=1", "trainer.sft_batch_size=4"]


@pytest.mark.parametrize(
    ("grpo", "opd", "ratio", "lower_bound"),
    [
        ({STEPS: 100, "steps": 150}, {STEPS: 20, "steps": 150}, 5.0, False),
        ({STEPS: None, "steps": 150}, {STEPS: 30, "steps": 150}, 5.0, True),  # GRPO's 150 steps, at least
        ({STEPS: 40, "steps": 150}, {STEPS: None, "steps": 150}, None, False),  # OPD never: no ratio
        ({STEPS: None, "steps": 150}, {STEPS: None, "steps": 150}, None, False),
    ],
)
def test_distill_vs_grpo_is_grpos_steps_over_opds(grpo, opd, ratio, lower_bound):
    assert distill_ratio(grpo, opd) == {
        "distill_vs_grpo": ratio,
        "distill_vs_grpo_is_lower_bound": lower_bound,
    }


@pytest.mark.slow
def test_a_short_distill_demo_trains_three_students_and_reuses_its_teacher(demo_assets, tmp_path):
    out = tmp_path / "demo_distill"
    out.mkdir()
    (out / "data").symlink_to(demo_assets["dir"] / "data")  # the session's videos and tiny model
    (out / "model").symlink_to(demo_assets["model"])
    r = run_distill_demo(str(out), STUDENTS, TEACHER, n_train=24, n_val=8)

    saved = json.loads((out / "report_distill.json").read_text())
    assert saved == json.loads(json.dumps(r))
    assert set(saved["methods"]) == {"grpo", "opd", "rlsd"}
    for m in saved["methods"].values():
        assert m["steps"] == 1 and [c["step"] for c in m["curve"]] == [0, 1]
        assert STEPS in m and all(0.0 <= c["val/accuracy"] <= 1.0 for c in m["curve"])
    # the runs differ as named: a teacher's KL is logged by the distilling two, not by GRPO
    assert saved["methods"]["grpo"]["kl_k1_first_last"] is None
    assert all(saved["methods"][m]["kl_k1_first_last"] is not None for m in ("opd", "rlsd"))
    assert {"distill_vs_grpo", "distill_vs_grpo_is_lower_bound"} <= set(saved)
    assert os.path.getsize(out / "demo_distill_curve.png") > 1000

    teacher = saved["teacher"]
    assert not teacher["reused"] and teacher["steps"] == 1 and teacher["sft_warmup_steps"] == 1
    weights = out / "teacher" / "model.safetensors"
    written = weights.stat().st_mtime_ns
    again = distill_teacher(str(out), TEACHER, n_train=24, n_val=8)
    assert again == {**teacher, "reused": True}
    assert weights.stat().st_mtime_ns == written  # not trained or exported again


@pytest.mark.parametrize("flag", [["--tools"], ["--cold-start"], ["--compare"], ["--family", "qwen3_5"]])
def test_demo_distill_refuses_the_other_demos_flags(flag, tmp_path, capsys):
    from easyvideor1.cli import main

    assert main(["demo", "--distill", *flag, "--out", str(tmp_path / "out")]) == 2
    assert "demo --distill trains its own teacher" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # refused before anything was written
