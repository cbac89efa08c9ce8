"""Issue 11 item 9 (and the resume part of item 8): damaged checkpoints are recognised before
loading and passed over for the newest whole one; a resume rolls metrics.jsonl back to the restored
step; settings changed since the checkpoint are applied (optimizer) or refused (seed), by key."""

from __future__ import annotations

import json

import pytest

from easyvideor1.trainer.loop import Trainer


def _step_rows(path):
    return [m["step"] for m in map(json.loads, open(path)) if "actor/pg_loss" in m]


@pytest.mark.slow
def test_truncated_shard_falls_back_and_metrics_are_not_logged_twice(make_cfg, tmp_path, capsys):
    out = tmp_path / "run"
    Trainer(make_cfg(f"trainer.output_dir={out}", "trainer.save_every=1", "trainer.keep_last=3")).train()
    ckpts = out / "checkpoints"
    assert _step_rows(out / "metrics.jsonl") == [1, 2]
    shard = next((ckpts / "step_2" / "sharded").glob("*.safetensors"))
    size = shard.stat().st_size
    with open(shard, "r+b") as f:
        f.truncate(size // 2)

    resumed = Trainer(make_cfg(f"trainer.output_dir={out}", "trainer.max_steps=3", "trainer.keep_last=3"))
    resumed.train()
    said = capsys.readouterr().out
    assert f"checkpoint {ckpts / 'step_2'} is damaged" in said and shard.name in said
    assert "falling back to step_1" in said and "resumed from" in said
    assert (ckpts / "step_2.damaged").is_dir()  # kept for a look, out of the way
    # steps 2 and 3 ran again from step 1: each is logged once
    assert _step_rows(out / "metrics.jsonl") == [1, 2, 3]
    assert sorted(p.name for p in ckpts.glob("step_*")) == ["step_1", "step_2.damaged", "step_3"]
    from easyvideor1.trainer.checkpoint_check import check_safetensors

    assert "truncated" in check_safetensors(ckpts / "step_2.damaged" / "sharded" / shard.name)


@pytest.mark.slow
def test_corrupt_state_is_named_and_changed_settings_are_applied_or_refused(make_cfg, tmp_path, capsys):
    out = tmp_path / "run"
    Trainer(make_cfg(f"trainer.output_dir={out}", "trainer.max_steps=1")).train()
    ckpt = out / "checkpoints" / "step_1"

    # the learning rate changed: applied to the restored optimizer and said
    t = Trainer(make_cfg(f"trainer.output_dir={out}", "trainer.max_steps=2", "trainer.lr=5e-3"))
    t.restore()
    assert t.step == 1 and [g["lr"] for g in t.optimizer.param_groups] == [5e-3]
    assert "trainer.lr: 0.001 -> 0.005" in capsys.readouterr().out
    # the seed cannot change: the prompt order of the saved run depends on it
    t = Trainer(make_cfg(f"trainer.output_dir={out}", "trainer.max_steps=2", "trainer.seed=7"))
    with pytest.raises(ValueError, match=r"trainer.seed changed .* \(0 -> 7\)"):
        t.restore()

    from easyvideor1.trainer.checkpoint_check import CheckpointError

    (ckpt / "trainer_state.json").write_text('{"step": 1, "sampler": ')  # cut short
    t = Trainer(make_cfg(f"trainer.output_dir={out}", "trainer.max_steps=2", f"trainer.resume={ckpt}"))
    with pytest.raises(CheckpointError, match=r"step_1/trainer_state.json: unreadable"):
        t.restore()
    # with resume=auto there is no whole checkpoint left: a clear error, not a fresh start
    t = Trainer(make_cfg(f"trainer.output_dir={out}", "trainer.max_steps=2"))
    with pytest.raises(CheckpointError, match="no checkpoint .* is whole"):
        t.restore()
    assert "trainer_state.json: unreadable" in capsys.readouterr().out
