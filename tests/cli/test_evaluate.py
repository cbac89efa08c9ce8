"""``eval --data VAL config=run.yaml``: with a training run's config, the records files are answered
with the run's validation sampling (``rollout.validation_sampling()``), so ``eval`` of a checkpoint
reproduces that step's validation without a flag; an explicit flag or ``eval.*`` key still wins."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from easyvideor1.cli import build_parser
from easyvideor1.cli.evaluate import _eval_config
from easyvideor1.data.synthetic import write_demo_set
from easyvideor1.models.tiny import make_tiny_model

EV = [sys.executable, "-m", "easyvideor1"]
ROLLOUT = {
    "n": 2,
    "max_new_tokens": 6,
    "min_new_tokens": 2,
    "presence_penalty": 0.5,
    "val_temperature": 0.0,
    "top_k": 0,
}


def _run_yaml(path, **sections) -> str:
    path.write_text(yaml.safe_dump({"rollout": dict(ROLLOUT), **sections}))
    return str(path)


def _config(*argv: str):
    args, extra = build_parser().parse_known_args(["eval", *argv])
    return _eval_config(args, extra)


def test_records_files_take_the_runs_validation_sampling(tmp_path) -> None:
    run = _run_yaml(tmp_path / "run.yaml")
    cfg = _config("--data", "val.jsonl", f"config={run}")
    validation = cfg.rollout.validation_sampling()
    assert cfg.eval.sampling() == validation and cfg.eval.max_new_tokens == 6
    assert (cfg.eval.min_new_tokens, cfg.eval.presence_penalty) == (2, 0.5)


@pytest.mark.parametrize(
    "argv, key, value",
    [
        (["--max-new-tokens", "9"], "max_new_tokens", 9),
        (["eval.max_new_tokens=11"], "max_new_tokens", 11),
        (["eval.presence_penalty=0"], "presence_penalty", 0.0),
        (["--preset", "greedy"], "temperature", 0.0),
    ],
)
def test_an_explicit_flag_or_eval_key_wins(tmp_path, argv, key, value) -> None:
    run = _run_yaml(tmp_path / "run.yaml")
    cfg = _config("--data", "val.jsonl", f"config={run}", *argv)
    assert getattr(cfg.eval, key) == value
    others = {k: getattr(cfg.eval, k) for k in ("max_new_tokens", "min_new_tokens") if k != key}
    assert others == {k: ROLLOUT[k] for k in others}, "the keys not given still come from the run"


def test_without_a_run_config_or_with_benchmarks_eval_keeps_its_defaults(tmp_path) -> None:
    eval_only = tmp_path / "eval.yaml"
    eval_only.write_text(yaml.safe_dump({"data": {"video_nframes": 4, "video_fps": None}}))
    for argv in (["--data", "val.jsonl"], ["--data", "val.jsonl", f"config={eval_only}"]):
        assert _config(*argv).eval.max_new_tokens is None  # each benchmark's own length
    run = _run_yaml(tmp_path / "run.yaml")
    mixed = _config("--data", "val.jsonl", "--benchmarks", "synthetic", f"config={run}")
    assert mixed.eval.max_new_tokens is None and mixed.eval.min_new_tokens == 0


def _cli(*args: str) -> None:
    r = subprocess.run([*EV, *args], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]


def _predictions(path) -> dict[str, str]:
    rows = [json.loads(line) for line in open(path) if line.strip()]
    return {r["sample_id"]: r["prediction"] for r in rows}


@pytest.mark.slow  # a one-step training run and one evaluation of its checkpoint (~1 min)
def test_eval_of_a_checkpoint_reproduces_its_validation(tmp_path) -> None:
    train, val = write_demo_set(str(tmp_path / "data"), n_train=8, n_val=6)
    model = make_tiny_model(str(tmp_path / "model"), "qwen3vl")
    out = tmp_path / "run"
    run = _run_yaml(
        tmp_path / "run.yaml",
        data={
            "train_files": [train],
            "val_files": [val],
            "video_nframes": 4,
            "video_fps": None,
            "video_min_pixels": 1024,
            "video_max_pixels": 1024,
            "prefetch": False,
        },
        model={"path": model},
        trainer={
            "output_dir": str(out),
            "max_steps": 1,
            "prompts_per_step": 2,
            "mini_batch_prompts": 2,
            "micro_batch_size": 4,
            "lr": 1e-3,
            "val_size": 6,
            "loggers": ["jsonl"],
        },
    )
    _cli("train", f"config={run}")
    _cli(
        "eval",
        "--data",
        val,
        f"config={run}",
        "--model",
        str(out / "checkpoints" / "step_1"),
        "--out",
        str(tmp_path / "eval"),
    )
    # validation at step 1 (the final one) wrote its answers as an eval output of the file "val"
    validated = _predictions(out / "validation" / "step_1" / "val" / "predictions.jsonl")
    evaluated = _predictions(tmp_path / "eval" / "val" / "predictions.jsonl")
    assert len(validated) == 6 and evaluated == validated, "the same greedy answer to every prompt"
