"""Training validation and ``eval`` are one pipeline: the same prompts, the same greedy responses.

A demo-sized run trains two steps and validates at step 2 (writing its rows in eval's
``predictions.jsonl`` format under ``trainer.output_dir/validation/step_2``); ``eval --data`` on
the same validation file with the run's config and the step-2 checkpoint must then give, for every
sample, the same sample id, the same prompt (by its digest, and as text in ``eval --dry-run``'s
``prompts.jsonl``) and the same greedy response. Real CLI subprocesses, a real tiny Qwen3-VL.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from easyvideor1.config import RunConfig, load_config, to_yaml

from ..trainer import conftest as trainer_setup

pytestmark = pytest.mark.slow
demo_assets = trainer_setup.demo_assets  # the trainer tests' demo set and tiny model, as a fixture here


def _cli(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run(
        [sys.executable, "-m", "easyvideor1", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def _rows(path) -> dict[str, dict]:
    with open(path, encoding="utf-8") as f:
        return {r["sample_id"]: r for r in map(json.loads, f)}


def test_validation_and_eval_give_the_same_prompts_and_greedy_responses(demo_assets, tmp_path):
    run = tmp_path / "run"
    cfg = load_config(
        RunConfig,
        None,
        trainer_setup.base_overrides(demo_assets, run)
        + ["trainer.val_every=2", "trainer.save_every=2", "trainer.val_size=8", "rollout.val_temperature=0"],
    )
    config = tmp_path / "run.yaml"
    config.write_text(to_yaml(cfg))
    _cli("train", f"config={config}", cwd=tmp_path)

    val_dir = run / "validation" / "step_2"
    names = [p.name for p in val_dir.iterdir() if p.is_dir()]
    assert len(names) == 1, names
    validation = _rows(val_dir / names[0] / "predictions.jsonl")
    assert len(validation) == 8

    checkpoint = run / "checkpoints" / "step_2"
    out = tmp_path / "eval"
    common = ("--data", demo_assets["val"], f"config={config}", "eval.max_new_tokens=6", "eval.batch_size=16")
    _cli("eval", *common, "--model", str(checkpoint), "--out", str(out), cwd=tmp_path)
    evaluated = _rows(out / names[0] / "predictions.jsonl")
    assert set(evaluated) == set(validation)
    for sid, row in validation.items():
        twin = evaluated[sid]
        assert not row["failed"] and not twin["failed"], (row, twin)
        assert twin["prompt_sha"] == row["prompt_sha"], sid
        assert twin["prediction"] == row["prediction"], (sid, row["prediction"], twin["prediction"])
        assert twin["accuracy"] == row["accuracy"], sid

    # the prompt text itself: eval's dry run writes what every sample's user turn says
    dry = tmp_path / "dry"
    _cli("eval", "--dry-run", *common, "--out", str(dry), cwd=tmp_path)
    from easyvideor1.data.prompt import format_question
    from easyvideor1.data.records import load_records
    from easyvideor1.evaluation.identity import sample_ids

    records = load_records(demo_assets["val"])
    by_id = dict(zip(sample_ids(records, names[0]), records, strict=True))
    with open(dry / names[0] / "prompts.jsonl", encoding="utf-8") as f:
        prompts = [json.loads(line) for line in f]
    assert {p["sample_id"] for p in prompts} >= set(validation)
    for p in prompts:
        expected = format_question(by_id[p["sample_id"]], cfg.data.prompt_template)
        assert p["prompt"].replace("<video>", "") == expected.replace("<video>", ""), p["sample_id"]
