"""Precision through the real trainer: fp32 master weights computed in bf16 (the GPU recipes' keys)
move every weight one step of lr 1e-6 touches; bf16 masters at that rate are refused at start-up.

bf16 keeps 8 significant bits: a weight of 0.02 has a spacing of ~1.2e-4 and one AdamW step at
lr 1e-6 moves it by at most ~1e-6, so with bf16 masters the update rounds away silently."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from easyvideor1.trainer.precision import changed_share, frozen_share

from .conftest import base_overrides, train_in_subprocess

RECIPE = ("model.dtype=float32", "distributed.param_dtype=bfloat16", "distributed.reduce_dtype=float32")
ONE_STEP = (
    "trainer.lr=1e-6",
    "trainer.max_steps=1",
    "trainer.mini_batch_prompts=4",  # one optimizer step
    "trainer.val_size=0",
    "rollout.hybrid=always",  # a correct offline answer in every group: non-zero advantages
)


def test_the_spacing_rule_matches_bf16_rounding() -> None:
    w = torch.full((64,), 0.02)
    assert frozen_share([w.to(torch.bfloat16)], 1e-6) == 1.0  # 1e-6 < 1.2e-4 / 2
    assert frozen_share([w.to(torch.bfloat16)], 1e-4) == 0.0
    assert frozen_share([w], 1e-9) == 0.0  # fp32 masters are never refused
    bf = w.to(torch.bfloat16)
    assert torch.equal(bf - 1e-6, bf) and not torch.equal(bf - 1e-4, bf)  # what the rule predicts


@pytest.mark.slow
def test_fp32_masters_in_bf16_compute_move_every_weight_and_bf16_masters_are_refused(
    demo_assets, tmp_path, capsys
):
    from transformers import AutoModelForImageTextToText

    from easyvideor1.trainer.checkpoint import load_checkpoint

    out = tmp_path / "run"
    train_in_subprocess([*base_overrides(demo_assets, out), *RECIPE, *ONE_STEP], ranks=2)
    start = AutoModelForImageTextToText.from_pretrained(demo_assets["model"]).state_dict()
    model = AutoModelForImageTextToText.from_pretrained(demo_assets["model"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    load_checkpoint(Path(out) / "checkpoints" / "step_1", model, opt, None)  # the exact sharded state
    assert all(p.dtype == torch.float32 for p in model.parameters())
    moments = {name: opt.state[p]["exp_avg_sq"] for name, p in model.named_parameters() if p in opt.state}
    share = changed_share(start, model.state_dict(), moments)
    assert share["params_changed_fraction"] > 0.99, share
    assert share["norm_gains_changed"] == share["norm_gains"] > 0, share

    # refused before anything is copied or sharded, on every rank alike (one process shows it)
    from easyvideor1.cli import main

    args = [*base_overrides(demo_assets, tmp_path / "bf16"), "model.dtype=bfloat16", *ONE_STEP]
    assert main(["train", *args]) == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]  # one line, no traceback
    assert line.startswith("easyvideor1 train: model.dtype=bfloat16 master weights with trainer.lr=1e-06"), (
        line
    )
    assert "distributed.param_dtype=bfloat16" in line
