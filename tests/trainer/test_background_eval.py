"""``trainer.eval``: benchmarks evaluated on checkpoints in a background process while training
goes on, logged at the step they evaluated; a resumed run evaluates no step twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from easyvideor1.config import ConfigError, load_config
from easyvideor1.trainer.background_eval import BackgroundEvals, _Running
from easyvideor1.trainer.loop import Trainer

EVAL = ("trainer.eval.every=2", "trainer.eval.max_samples=4", "trainer.val_size=0")


def _rows(cfg):
    return [json.loads(line) for line in open(os.path.join(cfg.trainer.output_dir, "metrics.jsonl"))]


def _timed(trainer: Trainer, monkeypatch) -> list[float]:
    """When each RL step started (wall clock)."""
    starts, step = [], trainer.rl_step

    def timed():
        starts.append(time.time())
        return step()

    monkeypatch.setattr(trainer, "rl_step", timed)
    return starts


def test_steps_go_on_while_the_checkpoint_is_evaluated(make_cfg, demo_assets, monkeypatch):
    cfg = make_cfg(*EVAL, f"trainer.eval.data=[{demo_assets['val']}]", "trainer.max_steps=4")
    trainer = Trainer(cfg)
    starts = _timed(trainer, monkeypatch)
    trainer.train()
    trainer.close()
    rows = [r for r in _rows(cfg) if "eval/val/accuracy" in r]
    assert [r["step"] for r in rows] == [2, 4]
    assert all(0.0 <= r["eval/val/accuracy"] <= 1.0 and r["eval/val/evaluated"] == 4 for r in rows)
    root = os.path.join(cfg.trainer.output_dir, "eval")
    step2 = os.path.join(root, "step_2")
    finished = os.path.getmtime(os.path.join(step2, "results", "results.json"))
    assert starts[2] < finished  # step 3 started before step 2's evaluation had ended
    for n in (2, 4):  # results kept, weights removed once evaluated
        assert json.load(open(os.path.join(root, f"step_{n}", "logged.json")))["step"] == n
        assert not os.path.exists(os.path.join(root, f"step_{n}", "model"))
        assert os.path.exists(os.path.join(root, f"step_{n}", "results", "val", "predictions.jsonl"))


def test_a_resumed_run_evaluates_no_step_twice(make_cfg, demo_assets, monkeypatch):
    first = make_cfg(
        *EVAL,
        f"trainer.eval.data=[{demo_assets['val']}]",
        "trainer.max_steps=2",
        "trainer.eval.keep_weights=true",
    )
    Trainer(first).train()
    root = os.path.join(first.trainer.output_dir, "eval")
    # as if the first run had stopped before step 2's evaluation finished: no results, not logged
    os.remove(os.path.join(root, "step_2", "logged.json"))
    os.remove(os.path.join(root, "step_2", "results", "results.json"))
    kept = [r for r in _rows(first) if "eval/val/accuracy" not in r]
    with open(os.path.join(first.trainer.output_dir, "metrics.jsonl"), "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in kept)
    predictions = os.path.join(root, "step_2", "results", "val", "predictions.jsonl")
    answered = open(predictions).read()
    # and an evaluation of a step past the checkpoint (weights the resumed run trains anew)
    os.makedirs(os.path.join(root, "step_6"))
    resumed = make_cfg(*EVAL, f"trainer.eval.data=[{demo_assets['val']}]", "trainer.max_steps=4")
    trainer = Trainer(resumed)
    trainer.train()
    trainer.close()
    rows = [r for r in _rows(resumed) if "eval/val/accuracy" in r]
    assert [r["step"] for r in rows] == [2, 4]  # step 2 started again, logged once
    assert open(predictions).read() == answered  # its samples were answered already: none again
    assert not os.path.exists(os.path.join(root, "step_6"))
    assert not os.path.exists(os.path.join(root, "step_2", "model"))  # removed once evaluated


def test_unknown_benchmark_is_refused_at_start_up(make_cfg):
    with pytest.raises((ConfigError, ValueError), match="trainer.eval.*unknown benchmark"):
        Trainer(make_cfg("trainer.eval.every=2", "trainer.eval.benchmarks=[no_such_bench]"))


def test_a_failed_evaluation_removes_its_exported_weights(tmp_path):
    cfg = load_config(overrides=[f"trainer.output_dir={tmp_path}", "trainer.eval.every=2"])
    logged = []
    logger = SimpleNamespace(write=logged.append, log=lambda step, metrics, **_: logged.append(metrics))
    evals = BackgroundEvals(cfg, SimpleNamespace(dist=SimpleNamespace(is_main=False), logger=logger))
    step_dir = tmp_path / "eval" / "step_2"
    (step_dir / "model").mkdir(parents=True)
    (step_dir / "model" / "model.safetensors").write_bytes(b"weights")
    failing = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    evals.running[2] = _Running(2, failing, open(step_dir / "eval.log", "a"))
    evals.wait()
    assert not (step_dir / "model").exists() and (step_dir / "eval.log").exists()
    assert "eval of step 2 failed (exit code 3)" in logged[-2] and logged[-1] == {"eval/failed": 1.0}
