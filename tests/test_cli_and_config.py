"""The command line and the config tree (YAML + dotted overrides)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from easyvideor1.config import ConfigError, RunConfig, load_config


def test_yaml_then_dotted_overrides(tmp_path):
    cfg_file = tmp_path / "run.yaml"
    cfg_file.write_text("data:\n  video_fps: 1.0\n  model_family: qwen2_5vl\n  video_max_frames: 64\n")
    cfg = load_config(RunConfig, str(cfg_file), ["data.video_max_frames=32", "data.cache_dir=/c"])
    assert (cfg.data.video_fps, cfg.data.video_max_frames) == (1.0, 32)
    assert cfg.data.factor == 28 and cfg.data.cache_dir == "/c"
    p = cfg.data.sampling_params()
    assert (p.factor, p.fps, p.max_frames) == (28, 1.0, 32)


@pytest.mark.parametrize(
    "override,fragment",
    [
        ("data.vidoe_fps=1", "vidoe_fps"),
        ("data.video_fps=fast", "video_fps"),
        ("data.model_family=llama", "llama"),
        ("data.cache_mode=sometimes", "cache_mode"),
        ("data.video_max_pixels=100", "below min_pixels"),
    ],
)
def test_bad_config_is_a_clear_error(override, fragment):
    with pytest.raises((ConfigError, ValueError), match=fragment):
        load_config(RunConfig, None, [override])


def test_synth_then_preprocess_from_the_command_line(tmp_path):
    out = tmp_path / "syn"
    r = subprocess.run(
        [sys.executable, "-m", "easyvideor1", "synth", "--out", str(out), "--n", "3"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    records = [json.loads(line) for line in open(out / "records.jsonl")]
    types = {rec["problem_type"] for rec in records}
    assert {"multiple choice", "numerical", "ocr", "boolean"} <= types
    cfg = tmp_path / "c.yaml"
    cfg.write_text("data:\n  video_min_pixels: 4096\n  video_max_pixels: 16384\n")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "easyvideor1",
            "preprocess",
            "--data",
            str(out / "records.jsonl"),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--quiet",
            f"config={cfg}",
            "data.video_fps=1",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    report = json.loads((tmp_path / "cache" / "report.json").read_text())
    assert report["built"] == 3 and report["failed"] == 0
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "easyvideor1",
            "preprocess",
            "--data",
            str(out / "records.jsonl"),
            "--cache-dir",
            str(tmp_path / "c2"),
            "data.nope=1",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "nope" in r.stderr


def test_demo_config_trains_directly_from_the_command_line(tmp_path):
    from easyvideor1.demo import demo_config_path

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "easyvideor1",
            "train",
            f"config={demo_config_path()}",
            "trainer.max_steps=2",
            f"trainer.output_dir={tmp_path / 'run'}",
            f"demo.data_dir={tmp_path / 'data'}",
            "demo.n_train=16",
            "demo.n_val=8",
            f"model.path={tmp_path / 'model'}",
            f"data.cache_dir={tmp_path / 'cache'}",
            "trainer.sft_warmup_steps=2",
            "trainer.sft_batch_size=8",
            "trainer.val_size=8",
            "trainer.loggers=[jsonl]",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    final = json.loads(r.stdout.strip().splitlines()[-1])
    assert 0.0 <= final["val/accuracy"] <= 1.0
    assert (tmp_path / "run" / "checkpoints" / "step_2" / "model.safetensors").exists()
    assert (tmp_path / "run" / "metrics.jsonl").exists()


def test_demo_command_writes_its_report_and_plot(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "easyvideor1",
            "demo",
            "--out",
            str(tmp_path / "demo"),
            "trainer.max_steps=2",
            "trainer.sft_warmup_steps=2",
            "demo.n_train=16",
            "demo.n_val=8",
            "trainer.val_size=8",
            "trainer.val_every=0",
            "trainer.loggers=[jsonl]",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads((tmp_path / "demo" / "report.json").read_text())
    assert set(report) >= {"accuracy_before", "accuracy_after", "chance", "steps", "wall_seconds"}
    assert report["steps"] == 2 and report["chance"] == 0.25
    assert (tmp_path / "demo" / "reward_curve.png").stat().st_size > 1000
    assert "accuracy after" in r.stdout
