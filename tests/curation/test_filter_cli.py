"""`easyvideor1 filter` end to end on the demo's synthetic videos with a tiny Qwen3-VL trained
partway (ten supervised warm-up steps: it mostly writes ``<answer>X</answer>``, often with the
wrong colour, so pass rates spread between 0 and 1): pass rates equal a hand count of the sampled
responses, which are the model's own (regenerated here with the record's seed), the kept set is
exactly the band, and a run killed with SIGKILL and rerun writes the uninterrupted run's files."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest

from easyvideor1.demo import demo_config_path
from easyvideor1.outdir import LOCK_NAME
from easyvideor1.resolve import resolve_data
from easyvideor1.rewards import compute_score

EV = [sys.executable, "-m", "easyvideor1"]
FRAMES = ["--nframes", "4", "--min-pixels", "1024", "--max-pixels", "1024"]
N = 8
OUTPUTS = ("pass_rates.jsonl", "kept/val.jsonl", "report.json", "report.md")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The demo set (16 training, 12 held-out records) and a model after 10 warm-up steps."""
    d = tmp_path_factory.mktemp("filter")
    overrides = [
        f"demo.data_dir={d / 'data'}", "demo.n_train=16", "demo.n_val=12", f"model.path={d / 'base'}",
        "data.cache_dir=null", f"trainer.output_dir={d / 'train'}", "trainer.sft_warmup_steps=10",
        "trainer.sft_batch_size=8", "trainer.sft_lr=5e-3", "trainer.max_steps=1", "trainer.save_every=1", "trainer.val_size=0",
        "trainer.prompts_per_step=2", "trainer.mini_batch_prompts=2", "trainer.micro_batch_size=4",
        "rollout.n=2", "trainer.loggers=[jsonl]",
    ]  # fmt: skip
    r = subprocess.run(
        [*EV, "train", f"config={demo_config_path()}", *overrides], capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return d / "train" / "checkpoints" / "step_1", d / "data" / "val.jsonl"


def _cmd(model, data, out, *extra):
    return [
        *EV, "filter", "--model", str(model), "--data", str(data), "--out", str(out), "--n", str(N),
        "--max-new-tokens", "8", "--load-workers", "1", *FRAMES, *extra,
    ]  # fmt: skip


def _run(cmd) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


@pytest.fixture(scope="module")
def full_run(trained, tmp_path_factory):
    model, data = trained
    out = tmp_path_factory.mktemp("full")
    _run(_cmd(model, data, out))
    return out


def _lines(path) -> list[dict]:
    return [json.loads(x) for x in open(path) if x.strip()]


def test_pass_rates_match_a_hand_count_and_the_band(trained, full_run):
    model, data = trained
    records = _lines(data)
    rates = _lines(full_run / "pass_rates.jsonl")
    responses = {r["sample_id"]: r for r in _lines(full_run / "responses.jsonl")}
    assert [r["problem_id"] for r in rates] == [r["problem_id"] for r in records]
    for rec, rate in zip(records, rates, strict=True):
        texts = responses[rate["sample_id"]]["responses"]
        assert len(texts) == rate["n"] == N
        # by hand: each response scored on its own with the reward library's public call; a clean
        # "<answer>X</answer>" is right exactly when X is the gold letter
        acc = [
            compute_score(t, rec["answer"], rec["problem_type"], rec["options"])["accuracy"] for t in texts
        ]
        for t, a in zip(texts, acc, strict=True):
            if (m := re.fullmatch(r"<answer>([A-D])</answer>", t)) is not None:
                assert a == float(m.group(1) == rec["answer"]), t
        right = sum(a == 1.0 for a in acc)
        assert rate["passes"] == right, (rec["problem_id"], texts)
        assert rate["pass_rate"] == right / N and rate["kept"] == (1 <= right <= 7)
    assert any(r["kept"] for r in rates), "a model trained partway solves some records only sometimes"
    lines = open(data, encoding="utf-8").readlines()
    kept = [lines[r["position"]] for r in rates if r["kept"]]
    assert open(full_run / "kept" / "val.jsonl", encoding="utf-8").readlines() == kept

    # the responses are the model's own: record 0 sampled again here with its seed
    import torch

    from easyvideor1.curation.sampler import record_seed
    from easyvideor1.data.config import DataConfig
    from easyvideor1.data.dataset import RecordDataset, encode_prompts
    from easyvideor1.data.records import load_records
    from easyvideor1.models.loading import load_policy
    from easyvideor1.rollout.base import SamplingConfig
    from easyvideor1.rollout.hf import HFRolloutEngine

    policy, processor = load_policy(str(model))
    cfg = DataConfig(video_fps=None, video_nframes=4, video_min_pixels=1024, video_max_pixels=1024)
    cfg = resolve_data(cfg, str(model))
    ds = RecordDataset(load_records(str(data))[:1], cfg, str(data))
    batch = encode_prompts(processor, [ds[0]], cfg, ds.loader)
    torch.manual_seed(record_seed(0, rates[0]["sample_id"]))
    out = HFRolloutEngine(policy.eval(), processor).generate(batch, [N], SamplingConfig(max_new_tokens=8))
    assert out.texts == responses[rates[0]["sample_id"]]["responses"]

    # another band: the same responses, the kept set follows the band (nothing sampled again)
    from easyvideor1.curation import FilterSettings, finish
    from easyvideor1.curation.inputs import load_inputs
    from easyvideor1.evaluation.identity import model_fingerprint
    from easyvideor1.rewards import RewardConfig

    files = load_inputs([str(data)], RewardConfig())
    os.makedirs(full_run / "b")
    shutil.copy(full_run / "responses.jsonl", full_run / "b" / "responses.jsonl")
    settings = FilterSettings(n=N, max_new_tokens=8, keep="0.5:1")
    report = finish(
        files, cfg, RewardConfig(), settings, str(full_run / "b"), str(model), model_fingerprint(str(model))
    )
    kept = [json.loads(x)["problem_id"] for x in open(full_run / "b" / "kept" / "val.jsonl")]
    assert (
        kept == [x["problem_id"] for x in rates if x["passes"] >= 4]
        and report["totals"]["failed_to_load"] == 0
    )


@pytest.mark.slow  # two filter runs of a model on 12 records x 8 responses
def test_sigkill_then_rerun_equals_an_uninterrupted_run(trained, full_run, tmp_path):
    model, data = trained
    total = len(_lines(data))
    out = tmp_path / "killed"
    proc = subprocess.Popen(
        _cmd(model, data, out), start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    path = out / "responses.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not path.exists() or sum(1 for _ in open(path)) < 3):
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = sum(1 for _ in open(path))
    assert 0 < before < total, "the kill must land midway"
    with open(path, "a") as f:
        f.write('{"sample_id": "torn')  # a line cut by the kill
    r = _run(_cmd(model, data, out))
    assert f"{before} of {total} records already sampled" in r.stdout
    for name in OUTPUTS:
        assert (out / name).read_bytes() == (full_run / name).read_bytes(), name
    ref = {r["sample_id"]: r["responses"] for r in _lines(full_run / "responses.jsonl")}
    got = [json.loads(x) for x in open(path) if x.strip() and not x.startswith('{"sample_id": "torn')]
    assert {r["sample_id"]: r["responses"] for r in got} == ref
    assert len(got) == total, "no record sampled twice"


@pytest.mark.slow  # starts a vLLM engine (about a minute on 2 CPU cores)
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_vllm_engine_resumes_an_hf_run_greedy(trained, tmp_path):
    """Greedy decoding is engine-independent, so the engine is not part of a greedy run's settings: a
    vLLM run (one request per record, n completions) finishes a run the HF engine started and
    writes the HF run's results."""
    model, data = trained
    greedy = ["--temperature", "0", "--n", "2"]
    _run(_cmd(model, data, tmp_path / "hf", *greedy))
    (tmp_path / "vllm").mkdir()
    head = open(tmp_path / "hf" / "responses.jsonl").readlines()[:5]
    (tmp_path / "vllm" / "responses.jsonl").write_text("".join(head))
    # an interrupted filter run: its lock (which names the command) stays with its first rows
    shutil.copy(tmp_path / "hf" / LOCK_NAME, tmp_path / "vllm" / LOCK_NAME)
    cpus = sorted(os.sched_getaffinity(0))
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": f"{cpus[0]}-{cpus[-1]}",
    }
    cmd = _cmd(model, data, tmp_path / "vllm", *greedy, "--engine", "vllm", "--enforce-eager")
    r = subprocess.run(cmd + ["--max-in-flight", "4"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "5 of 12 records already sampled" in r.stdout
    hf = {x["sample_id"]: x["responses"] for x in _lines(tmp_path / "hf" / "responses.jsonl")}
    got = _lines(tmp_path / "vllm" / "responses.jsonl")
    assert len(got) == 12 and {x["sample_id"]: x["responses"] for x in got} == hf
    for name in ("pass_rates.jsonl", "kept/val.jsonl"):
        assert (tmp_path / "vllm" / name).read_bytes() == (tmp_path / "hf" / name).read_bytes(), name
