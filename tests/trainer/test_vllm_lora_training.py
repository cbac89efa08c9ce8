"""LoRA training with ``rollout.engine=vllm``: the engine follows the adapter, either way it is sent.

A run trains 2 steps (rank-8 LoRA, high learning rate, hybrid groups) with vLLM rollouts and
validates greedily with the same engine at the end. Its final validation generations must equal HF
greedy generation from the merged checkpoint built independently of our merge code (peft's
``PeftModel.from_pretrained(base, step_2/adapter).merge_and_unload()``, saved with
``save_pretrained`` and loaded back), and the run's own ``merged/`` export; and differ from the
base model's. ``merged`` pushes merged weights; ``adapter`` runs vLLM's LoRA and sends the adapter,
here with rollouts one step off: step 2's batch is sampled during step 1's update on the initial
adapter, and the final validation still runs on the last one (pushed, then loaded once the batch
in flight is done).
"""

from __future__ import annotations

import importlib.util
import json

import pytest

from .conftest import base_overrides, train_in_subprocess
from .test_vllm_training import _greedy

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed"),
]


def _peft_merged(base_dir: str, adapter_dir, out_dir) -> str:
    """peft's own merge of the checkpoint's adapter, as a plain model directory."""
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText, AutoProcessor

    base = AutoModelForImageTextToText.from_pretrained(base_dir)
    PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload().save_pretrained(str(out_dir))
    AutoProcessor.from_pretrained(base_dir).save_pretrained(str(out_dir))
    return str(out_dir)


@pytest.mark.parametrize("sync,mode", [("merged", "sync"), ("adapter", "one_step_off")])
def test_vllm_rollouts_follow_the_lora_policy(make_cfg, demo_assets, tmp_path, sync, mode):
    out = tmp_path / "run"
    overrides = [
        *base_overrides(demo_assets, out),
        "model.lora.rank=8",
        "model.lora.alpha=32",
        "trainer.export_merged=true",
        "rollout.engine=vllm",
        "rollout.vllm.dtype=float32",  # the tiny model trains in fp32: the engine computes as it does
        f"rollout.vllm.lora_sync={sync}",
        f"rollout.mode={mode}",
        "rollout.hybrid=always",  # a correct offline answer in every group: non-zero advantages
        "trainer.mini_batch_prompts=4",
        "trainer.lr=2e-2",
        "trainer.val_size=8",
    ]
    r = train_in_subprocess(overrides)
    assert "Traceback" not in r.stderr
    rows = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    final = [g for g in rows if g["step"] == 2 and "probe" not in g]
    assert final, rows
    cfg = make_cfg(*overrides)
    indices = [g["index"] for g in final]
    ckpt = out / "checkpoints" / "step_2"
    reference = _peft_merged(demo_assets["model"], ckpt / "adapter", tmp_path / "peft_merged")
    vllm_texts = [g["response"] for g in final]
    assert vllm_texts == _greedy(reference, cfg, indices)
    assert vllm_texts == _greedy(ckpt / "merged", cfg, indices)
    assert vllm_texts != _greedy(demo_assets["model"], cfg, indices)  # stale engine weights would show
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    gaps = [m["rollout/logprob_gap_max"] for m in metrics if "rollout/logprob_gap_max" in m]
    assert len(gaps) == 2 and gaps[0] < 1e-4, gaps  # engine and trainer log-probs agree on one policy
    if mode == "sync":
        assert gaps[1] < 1e-4, gaps
    else:  # step 2 trains a batch sampled one update earlier
        stale = [m["rollout/staleness_max"] for m in metrics if "rollout/staleness_max" in m]
        assert stale == [0.0, 1.0] and gaps[1] > 1e-4, (stale, gaps)
