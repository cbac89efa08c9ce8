"""LoRA with vLLM: after a LoRA update the engine generates what the merged checkpoint generates.

One subprocess (``vllm_lora_worker.py``; importing vLLM changes process state) trains rank-8 LoRA
adapters on the tiny Qwen3-VL for a few AdamW steps inside the trainer's ``EngineHandoff``, whose
push sends ``merged_state_dict`` to an in-process vLLM engine; then peft's merged model is saved
with ``save_pretrained`` and loaded by transformers. Greedy responses (video and text prompts)
must be identical, and differ from the base model's (an engine left on the old weights fails).
A second engine runs vLLM's LoRA (``max_lora_rank``) and receives only the adapter, as PEFT files:
the same greedy responses.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed"),
]

WORKER = Path(__file__).with_name("vllm_lora_worker.py")


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    from easyvideor1.data.synthetic import write_synthetic_set
    from easyvideor1.models.tiny import make_tiny_model

    d = tmp_path_factory.mktemp("vllm_lora")
    model = make_tiny_model(str(d / "model"), "qwen3vl")
    data = write_synthetic_set(str(d / "syn"), 1, size=(96, 64), duration=1.0)
    r = subprocess.run(
        [sys.executable, str(WORKER), model, data, str(d)], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    return json.loads((d / "report.json").read_text())


def test_vllm_greedy_after_a_lora_update_equals_hf_greedy_on_the_merged_checkpoint(report) -> None:
    assert report["vllm_ids"] == report["hf_merged_ids"]
    assert report["vllm_texts"] == report["hf_merged_texts"]
    assert report["vllm_texts"] != report["base_texts"]  # the update changed greedy outputs


def test_engine_logprobs_match_the_unmerged_lora_forward(report) -> None:
    # the trainer computes W x + s B A x; the engine computes (W + s B A) x: rounding only
    assert report["logprob_gap_max"] < 1e-4, report["logprob_gap_max"]
    assert 0 < report["trainable"] < report["total"] * 0.5


def test_adapter_only_sync_serves_the_same_policy(report) -> None:
    """``rollout.vllm.lora_sync: adapter``: vLLM's LoRA over the base weights, only the adapter sent."""
    assert report["adapter_before_push_texts"] == report["base_texts"]  # no adapter yet: the base
    assert {"adapter_config.json", "adapter_model.safetensors"} <= set(report["adapter_files"])  # PEFT's
    assert report["adapter_ids"] == report["hf_merged_ids"]
    assert report["adapter_logprob_gap_max"] < 1e-4, report["adapter_logprob_gap_max"]
    assert report["adapter_loras_after_second_push"] == [2]
    assert report["adapter_second_texts"] == report["adapter_texts"]
