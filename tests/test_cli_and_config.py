"""The command line and the config tree (YAML + dotted overrides)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from easyvideor1.config import ConfigError, RunConfig, load_config
from tests.conftest import hold_in_subprocess, one_line_error


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
            "--model-family",
            "qwen3vl",
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


# ---------------------------------------------------------------- issue 11 item 8: settings at load


@pytest.mark.parametrize(
    "overrides,fragments",
    [
        (["trainer.micro_batch_size=-1"], ["trainer.micro_batch_size", ">= 1", "-1"]),
        (["trainer.micro_batch_size=0"], ["trainer.micro_batch_size"]),
        (["trainer.mini_batch_prompts=0"], ["trainer.mini_batch_prompts"]),
        (["trainer.ppo_epochs=0"], ["trainer.ppo_epochs"]),
        (["trainer.max_steps=0"], ["trainer.max_steps"]),
        (["trainer.lr=-1e-6"], ["trainer.lr", "> 0"]),
        (["trainer.betas=[0.9,1.0]"], ["trainer.betas[1]"]),
        (["trainer.max_grad_norm=0"], ["trainer.max_grad_norm"]),
        (["trainer.keep_last=-1"], ["trainer.keep_last"]),
        (["trainer.loggers=[jsonl,tensorbaord]"], ["trainer.loggers", "console, jsonl, tensorboard, wandb"]),
        (["rollout.n=1"], ["rollout.n=1", "algorithm.adv_estimator=grpo"]),
        (["rollout.n=1", "algorithm.adv_estimator=rloo"], ["rollout.n=1", "rloo"]),
        (["rollout.top_p=1.5"], ["rollout.top_p", "(0, 1]"]),
        (["rollout.top_k=-1"], ["rollout.top_k"]),
        (["rollout.max_new_tokens=0"], ["rollout.max_new_tokens"]),
        (["rollout.hybrid_threshold=1.5"], ["rollout.hybrid_threshold", "[0, 1]"]),
        (["rollout.val_temperature=-0.5"], ["rollout.val_temperature"]),
        (["rollout.vllm.gpu_memory_utilization=1.2"], ["rollout.vllm.gpu_memory_utilization"]),
        (["rollout.hybrid=always", "rollout.n=2", "rollout.offline_k=2"], ["rollout.offline_k=2"]),
        (["data.video_fps=-2"], ["data.video_fps", "> 0"]),
        (["data.video_min_frames=8", "data.video_max_frames=4"], ["data.video_min_frames"]),
        (["data.max_prompt_length=0"], ["data.max_prompt_length"]),
        (["data.decode_time_limit=0"], ["data.decode_time_limit"]),
        (["data.prompt_template=fancy"], ["data.prompt_template", ".jinja"]),
        (["algorithm.gamma=1.5"], ["algorithm.gamma"]),
        (["algorithm.kl.coef=-0.1"], ["algorithm.kl.coef"]),
        (["algorithm.adv_estimator=grop"], ["algorithm.adv_estimator", "grpo"]),
        (["algorithm.online_filtering.enable=true", "rollout.n=1", "algorithm.adv_estimator=remax"], ["std"]),
        (["distributed.backend=mpi"], ["distributed.backend"]),
        (["model.dtype=float8"], ["model.dtype"]),
        (["demo.n_train=0"], ["demo.n_train"]),
    ],
)
def test_nonsense_settings_fail_at_load_naming_the_key(overrides, fragments):
    with pytest.raises(ConfigError) as e:
        load_config(RunConfig, None, overrides)
    for fragment in fragments:
        assert fragment in str(e.value), (fragment, str(e.value))


def test_sensible_edge_settings_still_load():
    cfg = load_config(
        RunConfig,
        None,
        [
            "rollout.n=1",
            "algorithm.adv_estimator=reinforce_plus_plus",
            "trainer.val_size=0",
            "trainer.keep_last=0",
        ],
    )
    assert cfg.rollout.n == 1 and cfg.trainer.val_size == 0


def _cli(*args, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "easyvideor1", *map(str, args)], capture_output=True, text=True, cwd=cwd
    )


def test_cli_config_and_input_errors_are_clear(tmp_path):
    broken = tmp_path / "run.yaml"
    broken.write_text("data:\n  video_fps: 2\ntrainer:\n  lr: [1e-6\n  max_steps: 3\n")
    for args, fragment in [
        (["train", f"config={broken}"], f"{broken}:5: invalid YAML"),
        (["train", f"config={tmp_path}"], f"config file {tmp_path} is a directory"),
        (["train", "trainer.micro_batch_size=-1"], "trainer.micro_batch_size must be >= 1, got -1"),
        (["train", "trainer.loggers=[jsonl,nope]"], "trainer.loggers entries must be among console"),
        (["preprocess", "--data", tmp_path, "--cache-dir", tmp_path / "c", "--quiet"], "is a directory"),
    ]:
        r = _cli(*args)
        assert r.returncode == 2 and fragment in r.stderr, (args, r.stderr[-800:])
        assert "Traceback" not in r.stderr
    r = _cli("synth", "--out", tmp_path / "syn", "--n", "-1")
    assert r.returncode == 2 and "argument --n: must be > 0" in r.stderr
    assert not (tmp_path / "syn").exists()


@pytest.fixture(scope="module")
def small_set(tmp_path_factory):
    """Three synthetic videos and a file standing where a directory is expected."""
    from easyvideor1.data.synthetic import write_synthetic_set

    d = tmp_path_factory.mktemp("cli_errors")
    write_synthetic_set(str(d / "syn"), 3, size=(64, 48), duration=(1.0, 1.5))
    (d / "afile").write_text("not a directory\n")
    return d


def test_output_paths_that_are_files_or_read_only_are_one_line_errors(small_set):
    d = small_set
    records, afile = d / "syn" / "records.jsonl", d / "afile"
    bench = ["--benchmarks", "synthetic", "--video-root", d / "syn"]
    preds = d / "preds.jsonl"
    preds.write_text(json.dumps({"sample_id": "x", "response": "A"}) + "\n")
    # /sys is read-only even for root (a chmod-ed directory is not: root writes it anyway)
    for args, fragments in [
        (["synth", "--out", afile, "--n", "1"], [f"--out {afile}: exists and is not a directory"]),
        (["synth", "--out", "/sys/kernel", "--n", "1"], ["--out /sys/kernel: cannot write there"]),
        (
            ["preprocess", "--data", records, "--cache-dir", afile, "--model-family", "qwen3vl", "--quiet"],
            [f"--cache-dir {afile}: exists and is not a directory"],
        ),
        (
            ["preprocess", "--data", records, "--cache-dir", "/sys/ev1-cache", "--model-family", "qwen3vl"],
            ["--cache-dir /sys/ev1-cache: cannot write there"],
        ),
        (["eval", "--dry-run", *bench, "--out", afile], [f"--out {afile}: exists and is not a directory"]),
        (["score", *bench, "--predictions", preds, "--out", "/sys/kernel"], ["--out /sys/kernel: cannot"]),
    ]:
        one_line_error(_cli(*args), *fragments)
    assert afile.read_text() == "not a directory\n"


def test_an_override_value_yaml_cannot_parse_names_the_key():
    r = _cli("train", "data.train_files=[a.jsonl")
    one_line_error(r, "override 'data.train_files': cannot parse value '[a.jsonl'", "expected ',' or ']'")
    with pytest.raises(ConfigError, match="override 'trainer.lr': cannot parse value '{1e-6'"):
        load_config(RunConfig, None, ["data.video_fps=1", "trainer.lr={1e-6"])


def test_frame_and_worker_flags_are_checked(small_set, tmp_path):
    records = small_set / "syn" / "records.jsonl"
    pre = [
        "preprocess",
        "--data",
        records,
        "--cache-dir",
        tmp_path / "c",
        "--model-family",
        "qwen3vl",
        "--quiet",
    ]
    for workers in ("0", "-1"):
        one_line_error(_cli(*pre, "--workers", workers), "argument --workers: must be > 0")
    one_line_error(_cli(*pre, "--fps", "1", "--nframes", "4"), "--fps 1.0 and --nframes 4 are exclusive")
    r = _cli(*pre, "data.video_fps=1", "data.video_nframes=4")
    one_line_error(r, "data.video_fps (1.0) and data.video_nframes (4) are exclusive")
    assert not (tmp_path / "c").exists(), "checked before anything is written"
    # 10^6 fps once rendered frames for minutes; the bound is an error at once
    r = subprocess.run([sys.executable, "-m", "easyvideor1", "synth", "--out", tmp_path / "s", "--fps", "1000000"],
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    one_line_error(r, "--fps must be <= 240", "got 1e+06")
    assert not (tmp_path / "s").exists()


def test_one_frame_rule_per_layer_the_flag_replacing_the_file(tmp_path):
    """A config file's rate and a flag's fixed count are not "both set": the flag replaces the rule."""
    import argparse

    from easyvideor1.cli.common import data_values

    run_yaml = tmp_path / "run.yaml"
    run_yaml.write_text("data:\n  video_fps: 1.0\n")
    flags = argparse.Namespace(fps=None, nframes=4)
    cfg = load_config(
        RunConfig, str(run_yaml), ["data.video_max_frames=8"], values={"data": data_values(flags)}
    )
    assert (cfg.data.video_fps, cfg.data.video_nframes) == (None, 4)
    assert load_config(RunConfig).data.video_fps == 2.0, "the default rate when no count is set"
    with pytest.raises(ConfigError, match="data.video_fps .* data.video_nframes"):
        load_config(RunConfig, None, ["data.video_nframes=4", "data.video_fps=2"])


def test_a_second_train_into_one_output_dir_names_the_first(tmp_path):
    out = tmp_path / "run"
    holder = hold_in_subprocess(out, "train")
    try:
        r = _cli("train", f"trainer.output_dir={out}", "trainer.max_steps=1")
        one_line_error(r, f"{out}: in use by another run (pid {holder.pid}", "command train",
                        "choose another trainer.output_dir")  # fmt: skip
    finally:
        holder.kill()
        holder.wait()


def test_a_killed_run_frees_its_directory_even_while_a_forked_child_lives(tmp_path):
    """Loader and data workers are forked: they must not keep a killed run's lock alive."""
    import os
    import signal

    from easyvideor1.outdir import hold

    code = (
        "import os, sys, time; from easyvideor1.outdir import hold\n"
        "with hold(sys.argv[1], '--out', 'eval'):\n"
        "    child = os.fork()\n"
        "    if child == 0:\n"
        "        time.sleep(120); os._exit(0)\n"
        "    print(child, flush=True); time.sleep(600)\n"
    )
    run = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    child = int(run.stdout.readline())
    try:
        run.kill()
        run.wait()
        os.kill(child, 0)  # still running
        with hold(tmp_path, "--out", "eval"):
            pass
    finally:
        os.kill(child, signal.SIGKILL)
