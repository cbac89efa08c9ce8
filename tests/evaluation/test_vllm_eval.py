"""``easyvideor1 eval --engine vllm`` (AsyncLLM, one request per sample) against the HF engine.

On the tiny model and synthetic videos, greedy predictions must be identical; the vLLM run also
resumes from a predictions file another run started, and records an unloadable video as a failure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from easyvideor1.data.synthetic import write_synthetic_set
from easyvideor1.models.tiny import make_tiny_model

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed"),
]


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    d = tmp_path_factory.mktemp("vllm_eval")
    write_synthetic_set(str(d / "syn"), 4, size=(64, 48), duration=(1.0, 2.0))
    rows = [json.loads(line) for line in open(d / "syn" / "records.jsonl")][:15]
    rows.append({**rows[0], "problem_id": "missing-video", "videos": ["videos/missing.mp4"]})
    (d / "syn" / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    make_tiny_model(str(d / "model"))
    return d


def _eval(assets, out, *extra):
    cpus = sorted(os.sched_getaffinity(0))
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": f"{cpus[0]}-{cpus[-1]}",
    }
    cmd = [sys.executable, "-m", "easyvideor1", "eval", "--model", str(assets / "model")]
    cmd += ["--benchmarks", "synthetic", "--video-root", str(assets / "syn"), "--out", str(out)]
    cmd += ["--min-pixels", "1024", "--max-pixels", "4096", "--nframes", "4", "--max-new-tokens", "24"]
    r = subprocess.run(cmd + list(extra), capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-4000:]
    rows = [json.loads(line) for line in open(out / "synthetic" / "predictions.jsonl") if line.strip()]
    return rows, json.loads((out / "results.json").read_text())["synthetic"]


def test_vllm_eval_predictions_equal_hf_and_resume(assets, tmp_path):
    hf_rows, hf_results = _eval(assets, tmp_path / "hf")
    # a run that stopped after 5 samples: the vLLM run must do exactly the other 11
    (tmp_path / "vllm" / "synthetic").mkdir(parents=True)
    head = "".join(json.dumps(r) + "\n" for r in hf_rows[:5])
    (tmp_path / "vllm" / "synthetic" / "predictions.jsonl").write_text(head)
    rows, results = _eval(  # the planted predictions carry no eval lock: reuse the folder on purpose
        assets,
        tmp_path / "vllm",
        "--engine",
        "vllm",
        "--max-in-flight",
        "8",
        "--enforce-eager",
        "--reuse-out",
    )
    ids = [r["sample_id"] for r in rows]
    assert len(ids) == len(set(ids)) == 16, "each sample recorded exactly once"
    hf = {r["sample_id"]: r for r in hf_rows}
    for r in rows[5:]:
        assert r["prediction"] == hf[r["sample_id"]]["prediction"], r["sample_id"]
        assert r.get("output_tokens") == hf[r["sample_id"]].get("output_tokens")
    failed = [r for r in rows if r["failed"]]
    assert [r["sample_id"].split("~")[0] for r in failed] == ["missing-video"] and failed[0][
        "accuracy"
    ] == 0.0
    assert results["failures"] == hf_results["failures"] == 1
    assert results["score"] == hf_results["score"] and results["evaluated"] == 16


def test_vllm_eval_with_tools_runs_episodes_like_hf(assets, tmp_path):
    """``eval --tools`` on the AsyncLLM engine: every sample an episode (its turns are vLLM requests
    as token ids, many samples in flight), rows equal to the HF engine's, turn for turn. Tool turns
    token for token on both engines are in ``tests/rollout/test_vllm_engine.py``."""
    tools = ["--tools", "seek,zoom", "--max-new-tokens", "40"]
    hf_rows, hf_results = _eval(assets, tmp_path / "hf", *tools)
    rows, results = _eval(
        assets, tmp_path / "vllm", *tools, "--engine", "vllm", "--max-in-flight", "8", "--enforce-eager"
    )
    hf = {r["sample_id"]: r for r in hf_rows}
    assert len(rows) == 16
    for r in rows:
        if r["failed"]:
            continue
        h = hf[r["sample_id"]]
        assert r["prediction"] == h["prediction"], r["sample_id"]
        turns = [(t["text"], [(c["name"], c["status"]) for c in t["calls"]]) for t in r["episode"]["turns"]]
        assert turns == [
            (t["text"], [(c["name"], c["status"]) for c in t["calls"]]) for t in h["episode"]["turns"]
        ]
        assert r["episode"]["finish"] == h["episode"]["finish"]
    assert results["tool_calls_per_sample"] == hf_results["tool_calls_per_sample"]
    assert results["score"] == hf_results["score"]
