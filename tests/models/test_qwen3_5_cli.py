"""Qwen3.5 end to end from the command line, with no ``data.model_family`` anywhere: the model
(config.json) names the family. ``make-tiny-model --family qwen3_5``, then ``train`` on the demo
config for 2 steps; the output holds a checkpoint that loads with ``from_pretrained``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.conftest import run_cli

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_make_tiny_qwen3_5_then_train_the_demo_config_and_load_the_checkpoint(tmp_path):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    demo = (ROOT / "configs" / "demo.yaml").read_text()
    assert "model_family" not in demo
    r = run_cli("make-tiny-model", "--family", "qwen3_5", "--out", "M", cwd=tmp_path, threads=2)
    assert r.returncode == 0, r.stderr[-2000:]
    r = run_cli(
        "train",
        f"config={ROOT / 'configs' / 'demo.yaml'}",
        "model.path=M",
        "trainer.max_steps=2",
        "trainer.output_dir=O",
        # the demo's assets, small: 32 prompts, 2 warm-up steps
        f"demo.data_dir={tmp_path / 'data'}",
        f"data.cache_dir={tmp_path / 'cache'}",
        "demo.n_train=8",
        "demo.n_val=2",
        # small steps: the hybrid layers run on transformers' PyTorch reference kernels here
        "trainer.val_size=2",
        "trainer.sft_warmup_steps=1",
        "trainer.sft_batch_size=4",
        "trainer.prompts_per_step=2",
        "trainer.mini_batch_prompts=2",
        "rollout.n=2",
        "trainer.loggers=[jsonl]",
        cwd=tmp_path,
        threads=2,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    ckpt = tmp_path / "O" / "checkpoints" / "step_2"
    assert (tmp_path / "O" / "checkpoints" / "latest").read_text().strip() == "step_2"
    model = AutoModelForImageTextToText.from_pretrained(str(ckpt))
    AutoProcessor.from_pretrained(str(ckpt))
    assert model.config.model_type == "qwen3_5"
    start = AutoModelForImageTextToText.from_pretrained(str(tmp_path / "M")).state_dict()
    moved = max(float((v - start[k]).abs().max()) for k, v in model.state_dict().items())
    assert moved > 0 and all(torch.isfinite(v).all() for v in model.state_dict().values())


def test_preprocess_takes_the_family_from_model_or_says_what_is_missing(tmp_path, capsys):
    """In process (the CLI's main), to spare two interpreter start-ups."""
    from easyvideor1.cli import main
    from easyvideor1.data.synthetic import write_demo_set
    from easyvideor1.models.tiny import make_tiny_model

    train, _ = write_demo_set(str(tmp_path / "d"), n_train=2, n_val=1)
    model = make_tiny_model(str(tmp_path / "m"), "qwen2_5_vl")
    common = ["preprocess", "--data", train, "--quiet", "--nframes", "4", "--workers", "1"]
    assert main([*common, "--cache-dir", str(tmp_path / "c0")]) == 2
    err = capsys.readouterr().err
    assert "give --model PATH" in err and "--model-family" in err
    assert (
        main([*common, "--cache-dir", str(tmp_path / "c1"), "--model", model, "--model-family", "qwen3vl"])
        == 2
    )
    assert "data.model_family is 'qwen3vl' but the model" in capsys.readouterr().err
    assert main([*common, "--cache-dir", str(tmp_path / "c2"), "--model", model]) == 0
    report = json.loads((tmp_path / "c2" / "report.json").read_text())
    assert report["built"] == 2 and report["failed"] == 0
    # the factor came from the model: Qwen2.5-VL frames are on the 28-pixel grid (not 32's)
    from safetensors import safe_open

    for entry in (tmp_path / "c2").rglob("*.safetensors"):
        with safe_open(str(entry), "pt") as f:
            _, h, w, _ = f.get_slice("frames").get_shape()
        assert h % 28 == 0 and w % 28 == 0 and (h % 32 or w % 32), (h, w)


def test_eval_qwen3_5_with_its_official_preset(tmp_path):
    """``easyvideor1 eval`` on a tiny Qwen3.5 (HF engine): the checkpoint names the family (no
    --model-family), the Qwen3.5 preset's sampling is what ran, every sample is evaluated."""
    from easyvideor1.data.synthetic import write_synthetic_set
    from easyvideor1.models.tiny import make_tiny_model

    write_synthetic_set(str(tmp_path / "syn"), 1, size=(64, 48), duration=1.0)
    model = make_tiny_model(str(tmp_path / "model"), "qwen3_5")
    r = run_cli(
        "eval",
        "--model",
        model,
        "--benchmarks",
        "synthetic",
        "--video-root",
        str(tmp_path / "syn"),
        "--out",
        str(tmp_path / "out"),
        "--preset",
        "qwen3_5-official",
        "--min-pixels",
        "1024",
        "--max-pixels",
        "4096",
        "--max-frames",
        "4",
        "--max-new-tokens",
        "8",
        "--max-samples",
        "3",
        cwd=tmp_path,
        threads=2,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    res = json.loads((tmp_path / "out" / "results.json").read_text())["synthetic"]
    assert res["evaluated"] == 3 and res["failures"] == 0
    detail = res["settings_detail"]
    assert detail["frames"]["model_family"] == "qwen3_5"
    sampling = json.dumps(detail)
    assert '"presence_penalty": 1.5' in sampling and '"top_p": 0.8' in sampling
