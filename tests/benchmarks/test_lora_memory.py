"""``benchmarks/lora_memory.py`` on a small Qwen3-VL: its byte counts are the exact ones, and the
two variants run the same model (LoRA's B starts at zero: the first losses are equal)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("peft")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import lora_memory  # noqa: E402

SIZES = ["--hidden", "256", "--layers", "2", "--intermediate", "512", "--heads", "4", "--kv-heads", "2"]
SIZES += ["--vocab", "4096", "--seq", "32", "--rank", "4"]


def test_full_vs_lora_figures_are_exact_and_printed(capsys) -> None:
    import torch

    result = lora_memory.main(SIZES)
    full, lora = result["full"], result["lora"]
    model = lora_memory.build_model(lora_memory._args(SIZES))
    linears = dict(model.named_modules())
    adapters = sum(
        4 * (linears[n].in_features + linears[n].out_features) for n in lora_memory.lora_targets(model)
    )
    assert lora["trainable"] == adapters  # rank 4 on every language-model linear layer, nothing else
    assert full["trainable"] == sum(p.numel() for p in model.parameters())
    assert lora["params"] == full["params"] + adapters
    # AdamW: exp_avg and exp_avg_sq for every float32 value that got a gradient (a text batch
    # leaves the vision tower without one), plus a one-value step count per tensor
    for r in (full, lora):
        tensors = r["optimizer_state_bytes"] - 2 * r["grad_bytes"]
        assert 0 < tensors <= 4 * 1000, tensors
    assert lora["grad_bytes"] == 4 * lora["trainable"]
    assert full["loss"] == lora["loss"]  # the same function before the first update
    assert 0 < lora["peak_step_bytes"] < full["peak_step_bytes"]
    assert result["optimizer_state_ratio"] > 20
    out = capsys.readouterr().out
    assert "AdamW state (MiB)" in out and "full / LoRA" in out
    assert torch.isfinite(torch.tensor(full["loss"]))
