"""InternVL3.5 from the command line: ``make-tiny-model --family internvl`` writes a checkpoint of
the family, and ``demo --family internvl`` runs the whole loop on it (the tiny model's 56x56 tiles
set the frame size; the Qwen-VL demo's 32x32 frame budget does not apply). A short run here; the
full demo's figures are in docs/demo.md."""

from __future__ import annotations

import json

import pytest

from tests.conftest import run_cli

pytestmark = pytest.mark.slow


def test_make_tiny_model_and_a_short_demo(tmp_path):
    r = run_cli("make-tiny-model", "--family", "internvl", "--out", "M", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    config = json.loads((tmp_path / "M" / "config.json").read_text())
    assert config["model_type"] == "internvl" and config["vision_config"]["image_size"] == [56, 56]
    r = run_cli(
        "demo",
        "--family",
        "internvl",
        "--out",
        "D",
        "demo.n_train=8",
        "demo.n_val=4",
        "trainer.max_steps=2",
        "trainer.sft_warmup_steps=2",
        "trainer.sft_batch_size=4",
        "trainer.prompts_per_step=2",
        "trainer.mini_batch_prompts=2",
        "trainer.val_every=2",
        "trainer.val_size=4",
        "rollout.n=2",
        "trainer.loggers=[jsonl]",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    report = json.loads((tmp_path / "D" / "report-internvl.json").read_text())
    assert report["family"] == "internvl" and report["steps"] == 2
    assert report["accuracy_before"] is not None and report["accuracy_after"] is not None
