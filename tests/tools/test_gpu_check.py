"""The GPU check kit (tools/gpu_check.sh), its wheels folder and the GPU recipes, on the CPU.

The dry run is the kit's whole path (wheel install, prepare, torchrun cache and decode runs, eval,
report) with tiny shapes and gloo, so the kit is known to work before GPU minutes are spent.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tools"
sys.path.insert(0, str(TOOLS))

import gpu_check  # noqa: E402
import gpu_wheels  # noqa: E402

PHASE_KEYS = ("time/data", "time/rollout", "time/logprobs", "time/update", "time/step")


def _probe_wheel(directory: Path) -> Path:
    """A real (tiny) wheel, written by hand: pip installs it like any other."""
    name, version = "gpu_check_probe", "1.0"
    files = {
        f"{name}/__init__.py": b'VALUE = "installed from a carried wheel"\n',
        f"{name}-{version}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        ).encode(),
        f"{name}-{version}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = f"{name}-{version}.dist-info/RECORD"
    lines = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{path},sha256={digest},{len(data)}")
    lines.append(f"{record},,")
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
        z.writestr(record, "\n".join(lines) + "\n")
    return wheel


def _kit(out: Path, work: Path, wheels: Path, *args: str, env_extra: dict | None = None, timeout=600):
    env = {
        **os.environ,
        "GPU_CHECK_PYTHON": sys.executable,
        "GPU_CHECK_WHEELS": str(wheels),
        "GPU_CHECK_WORK": str(work),
        **(env_extra or {}),
    }
    return subprocess.run(
        ["bash", str(TOOLS / "gpu_check.sh"), str(out), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.slow
def test_dry_run_runs_every_phase_and_reports(tmp_path):
    """~50 s on 2 cores: the same commands as on the GPU (torchrun, cache vs decode, eval)."""
    out, work, wheels = tmp_path / "report", tmp_path / "work", tmp_path / "wheels"
    _probe_wheel(wheels)
    r = _kit(out, work, wheels, "--dry-run")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    report = json.loads((out / "gpu_report.json").read_text())
    assert report["ok"] is True and report["mode"] == "dry-run"
    assert {k: v["status"] for k, v in report["phases"].items()} == dict.fromkeys(
        ("install", *gpu_check.PHASES), "ok"
    )

    # the carried wheel went into the target without the network, and the target leads PYTHONPATH
    env = report["environment"]
    assert env["wheels_installed"] == ["gpu_check_probe-1.0"]
    assert env["pythonpath"].split(":")[:2] == [str(work / "site"), str(ROOT / "src")]
    assert (work / "site" / "gpu_check_probe" / "__init__.py").is_file()

    profile = gpu_check.DRY_RUN
    for mode, from_cache in (("cache_only", True), ("decode_only", False)):
        run = report["train"][mode]
        assert run["steps_logged"] == profile.steps, mode
        for step in run["steps"]:
            assert all(step[k] > 0 for k in PHASE_KEYS), (mode, step)
            assert step["perf/tokens_per_s"] > 0
        assert run["mean_over_steps"] == list(range(2, profile.steps + 1))  # step 1 is the warm-up
        # the trainer joined a one-rank process group (gloo here, NCCL on a GPU) and logged as such
        assert (run["process"]["backend"], run["process"]["world_size"]) == ("gloo", 1)
        assert "perf/rank_token_imbalance" in run["mean"]
        loads = run["process"]["video_loads"]
        # cache_only: every video load came from the cache; decode_only: none did
        assert (loads["from_cache"] > 0, loads["decoded"] > 0) == (from_cache, not from_cache), (mode, loads)
    assert report["train"]["cache_only"]["process"]["checkpoint_seconds"]
    assert report["train"]["decode_only"]["process"]["checkpoint"].startswith("skipped")
    assert set(report["train"]["decode_over_cache"]) >= set(PHASE_KEYS)

    # one optimizer step at lr 1e-6 with fp32 masters in bf16 compute moved the weights it touched
    assert report["params_changed_fraction"] > 0.99, report["train"]["cache_only"]["process"]["first_update"]
    first = report["train"]["cache_only"]["process"]["first_update"]
    assert first["master_dtypes"] == ["torch.float32"] and first["norm_gains_changed"] == first["norm_gains"]
    assert report["attention_path"] == "sdpa"
    phases = report["memory_by_phase"]  # this process's resident memory on a CPU, the device's on a GPU
    assert {"after_generation", "after_logprobs", "update_peak", "after_wake_kv_cache"} <= set(phases), phases
    assert all(v > 0 for v in phases.values()) and phases["update_peak"] >= phases["after_logprobs"]
    long = report["long_micro_batch"]
    assert report["long_micro_batch_peak_gib"] > 0 and long["finite"] and long["attention_path"] == "sdpa"
    assert (long["prompt_tokens"], long["response_tokens"]) == (
        profile.long_prompt_tokens,
        profile.long_response_tokens,
    )
    assert (gpu_check.GPU.long_prompt_tokens, gpu_check.GPU.long_response_tokens) == (20000, 4096)
    # the planner's predictions of the same runs (a check only on a GPU; here they must exist)
    check = report["plan_check"]
    assert "error" not in check, check
    assert check["update_peak"]["predicted_gib"] > 0 and check["long_micro_batch"]["predicted_gib"] > 0
    assert check["update_peak"]["measured_gib"] == phases["update_peak"]
    assert "easyvideor1 plan against the kit" in (out / "gpu_report.md").read_text()

    ev = report["eval"]
    assert ev["evaluated"] == ev["samples"] == profile.eval_samples and ev["failures"] == 0
    assert ev["samples_per_s"] > 0 and ev["output_tokens"] > 0

    md = (out / "gpu_report.md").read_text()
    assert "dry-run): OK" in md and all(name in md for name in gpu_check.PHASES)
    # what comes back from the GPU machine: at most 8 files, at most two folders down
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 8 and all(len(p.relative_to(out).parts) <= 2 for p in files), files
    assert not (work / "train_cache" / "checkpoints").exists()  # GBs on a GPU: removed


def test_gpu_mode_without_a_gpu_fails_fast_with_a_report(tmp_path):
    out, work, wheels = tmp_path / "report", tmp_path / "work", tmp_path / "wheels"
    wheels.mkdir()
    t0 = time.time()
    r = _kit(out, work, wheels, env_extra={"CUDA_VISIBLE_DEVICES": ""}, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert time.time() - t0 < 60
    report = json.loads((out / "gpu_report.json").read_text())
    assert report["ok"] is False and "no CUDA device" in report["error"]
    assert list(report["phases"]) == ["install"]  # nothing else started
    assert "NOT OK" in (out / "gpu_report.md").read_text()


def test_wheels_that_do_not_install_stop_the_kit_with_a_report(tmp_path):
    out, work, wheels = tmp_path / "report", tmp_path / "work", tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "broken-1.0-py3-none-any.whl").write_bytes(b"not a zip file")
    r = _kit(out, work, wheels, "--dry-run", timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    report = json.loads((out / "gpu_report.json").read_text())
    assert report["phases"]["install"]["status"] == "failed" and "carried wheels" in report["error"]
    assert list(report["phases"]) == ["install"]  # nothing ran on a half-installed environment


def test_a_phase_past_its_limit_is_killed_with_its_children(tmp_path):
    pid_file = tmp_path / "child.pid"
    script = f"sleep 60 & echo $! > {pid_file}; wait"
    t0 = time.time()
    res = gpu_check.run_phase("slow", ["bash", "-c", script], str(tmp_path / "slow.log"), 2, dict(os.environ))
    assert res["status"] == "timeout" and time.time() - t0 < 20
    child = int(pid_file.read_text())
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the phase's child process {child} outlived the timeout")


def test_a_cuda_error_in_the_log_fails_the_phase_even_with_exit_code_0(tmp_path):
    cmd = ["bash", "-c", "echo 'RuntimeError: CUDA error: an illegal memory access was encountered'"]
    res = gpu_check.run_phase("p", cmd, str(tmp_path / "p.log"), 30, dict(os.environ))
    assert res["rc"] == 0 and res["status"] == "failed"
    assert "illegal memory access" in res["cuda_error"]
    ok = gpu_check.run_phase("q", ["bash", "-c", "echo fine"], str(tmp_path / "q.log"), 30, dict(os.environ))
    assert ok["status"] == "ok" and "cuda_error" not in ok


def test_one_torchrun_rank_joins_the_process_group_only_when_asked(monkeypatch):
    import torch.distributed as dist

    from easyvideor1.trainer.distributed import DistributedConfig, init_distributed, shutdown_distributed
    from tests.trainer.conftest import free_port

    for key, value in {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "RANK": "0",
        "LOCAL_RANK": "0",
        "WORLD_SIZE": "1",
    }.items():
        monkeypatch.setenv(key, value)
    plain = init_distributed(DistributedConfig(backend="gloo"))
    assert not plain.enabled and not dist.is_initialized()
    try:
        grouped = init_distributed(DistributedConfig(backend="gloo", group_with_one_rank=True))
        assert grouped.enabled and grouped.world == 1 and dist.get_backend() == "gloo"
    finally:
        shutdown_distributed()
    assert not dist.is_initialized()


def test_recipes_load_through_the_run_config():
    from easyvideor1.config import RunConfig, load_config

    big = load_config(RunConfig, str(ROOT / "configs" / "qwen3vl_8b_video_rl.yaml"), [])
    small = load_config(RunConfig, str(ROOT / "configs" / "qwen3vl_2b_1gpu.yaml"), [])
    for cfg in (big, small):
        assert cfg.rollout.engine == "vllm" and cfg.rollout.vllm.sleep_between_phases
        options = cfg.algorithm.policy_loss_options()
        assert (cfg.algorithm.adv_estimator, options["clip_ratio_low"], options["clip_ratio_high"]) == (
            "grpo",
            0.2,
            0.28,
        )
        assert cfg.algorithm.kl.type == "none" and cfg.rollout.n == 8 and cfg.trainer.lr == 1e-6
        assert cfg.model.gradient_checkpointing
        # fp32 masters and AdamW moments, bf16 compute and engine (a 1e-6 step rounds away in bf16)
        assert (cfg.model.dtype, cfg.distributed.param_dtype, cfg.rollout.vllm.dtype) == (
            "float32",
            "bfloat16",
            "bfloat16",
        )
        assert cfg.trainer.padding_free and cfg.model.attn_implementation == "flash_attention_2"
        # one optimizer step per rollout batch, as the reference
        assert cfg.trainer.mini_batch_prompts == cfg.trainer.prompts_per_step
    # the reference's 8-GPU run: 256 prompts, 2 fps up to 128 frames, 4,096-token responses
    assert (big.trainer.prompts_per_step, big.data.video_max_frames, big.rollout.max_new_tokens) == (
        256,
        128,
        4096,
    )
    assert big.trainer.prompts_per_step % 8 == 0  # split over 8 ranks
    for name in ("qwen3vl_8b_video_rl.yaml", "qwen3vl_2b_1gpu.yaml"):
        text = (ROOT / "configs" / name).read_text()
        assert "not yet measured" in text and "arrive with the scale-out work" not in text


def test_gpu_wheel_pins_satisfy_pyproject_and_cover_what_the_image_lacks():
    pins = gpu_wheels.read_pins()
    assert gpu_wheels.check_pins(pins, gpu_wheels.project_requirements()) == []
    from packaging.requirements import Requirement

    # the check is not vacuous: a pin outside pyproject's range and an uncovered dependency are named
    bad = gpu_wheels.check_pins(pins, [Requirement("av>=19"), Requirement("not-in-the-image>=1")])
    assert any(p.startswith("av:") for p in bad) and any("not-in-the-image" in p for p in bad)


def test_the_2b_model_config_is_qwen3vl_2b_sized():
    import gpu_check_prepare
    import torch
    from transformers import AutoModelForImageTextToText

    from easyvideor1.models.tiny import build_tokenizer

    config = gpu_check_prepare.model_config("2b", build_tokenizer())
    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)
    total = sum(p.numel() for p in model.parameters())
    vision = sum(p.numel() for p in model.model.visual.parameters())
    # Qwen3-VL-2B-Instruct: ~2.1 B parameters, ~0.4 B of them in the vision tower, tied embeddings
    assert 2.0e9 < total < 2.3e9 and 0.38e9 < vision < 0.43e9, (total, vision)
    assert model.lm_head.weight is model.model.language_model.embed_tokens.weight
    assert len(model.model.language_model.layers) == 28 and len(model.model.visual.blocks) == 24


def test_the_process_wrapper_writes_its_stats_when_the_command_fails(tmp_path):
    stats = tmp_path / "stats.json"
    missing = tmp_path / "missing.yaml"
    r = subprocess.run(
        [sys.executable, str(TOOLS / "gpu_check_run.py"), str(stats), "train", f"config={missing}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "missing.yaml" in r.stderr  # the CLI's own error and exit code
    seen = json.loads(stats.read_text())
    assert seen["rc"] == 2 and seen["command"] == ["train"] and seen["peak_host_rss_gib"] > 0


def test_gpu_wheels_fail_loudly_above_the_travel_limit(tmp_path):
    wheel = tmp_path / "big-1.0-py3-none-any.whl"
    wheel.write_bytes(os.urandom(3 * 2**20))
    tree = gpu_wheels.tree_bytes()
    assert tree > 0  # the working tree travels too and is counted
    fits = gpu_wheels.check_size([str(wheel)], limit=tree + 4 * 2**20)
    assert fits["wheel_bytes"] == 3 * 2**20
    with pytest.raises(gpu_wheels.WheelError, match="1 wheels .3.0 MiB. .* exceed the"):
        gpu_wheels.check_size([str(wheel)], limit=tree + 2 * 2**20)


def test_the_gpu_profile_run_config_is_valid(tmp_path):
    """The GPU run's settings are only loaded on the GPU machine: check them here first."""
    import yaml

    from easyvideor1.config import RunConfig, load_config

    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(gpu_check.run_config(gpu_check.GPU, str(tmp_path))))
    for mode in ("cache_only", "decode_only"):
        cfg = load_config(RunConfig, str(path), [f"data.cache_mode={mode}"])
        assert cfg.data.video_nframes == 64 and cfg.model.dtype == "float32"
        assert cfg.distributed.param_dtype == "bfloat16" and cfg.trainer.export_dtype == "bfloat16"
        assert cfg.distributed.group_with_one_rank and cfg.rollout.hybrid == "always"
    limits = gpu_check.GPU.limits
    assert set(limits) == set(gpu_check.PHASES) and gpu_check.GPU.deadline_s <= 450  # within 8 minutes
