"""The trainer's typed state (``trainer/state.py``) round-trips through its one save/restore path:
``TrainState.state_dict``/``load_state_dict`` alone, and ``Trainer.save``/``Trainer.restore`` on disk."""

from __future__ import annotations

import json

import pytest
import torch

from easyvideor1.trainer.loop import Trainer
from easyvideor1.trainer.sampler import PromptSampler
from easyvideor1.trainer.state import TrainState


def test_train_state_round_trips_through_json():
    state = TrainState(PromptSampler(10, 4, seed=3))
    for _ in range(3):  # into the second epoch
        state.sampler.next_batch()
    state.step, state.reference_moved = 3, True
    state.history = [{"step": 0, "val/accuracy": 0.25}, {"step": 3, "reward/overall": 0.5}]
    saved = json.loads(json.dumps(state.state_dict()))  # as trainer_state.json holds it

    back = TrainState(PromptSampler(10, 4, seed=3))
    back.load_state_dict(saved)
    assert (back.step, back.history, back.reference_moved) == (3, state.history, True)
    assert back.epoch == state.epoch == 1 and back.sampler.state_dict() == state.sampler.state_dict()
    assert back.sampler.next_batch() == state.sampler.next_batch()  # the same prompts come next
    with pytest.raises(ValueError, match="checkpoint was made for 10 prompts with seed 3"):
        TrainState(PromptSampler(9, 4, seed=3)).load_state_dict(saved)


def test_trainer_save_then_restore_gives_back_state_weights_and_optimizer(make_cfg, tmp_path):
    out = tmp_path / "run"
    first = Trainer(make_cfg(f"trainer.output_dir={out}", "trainer.val_size=0"))
    first.rl_step()
    first.state.step = 1
    first.state.history.append({"step": 1, "reward/overall": 0.5})
    rng = torch.get_rng_state()
    first.save()
    ckpt = out / "checkpoints" / "step_1"
    meta = json.loads((ckpt / "trainer_state.json").read_text())
    # the checkpoint's format: TrainState's keys beside the checkpoint's own
    assert list(meta) == [
        "step",
        "world_size",
        "optimizer",
        "scheduler",
        "python_rng",
        "sampler",
        "history",
        "reference_moved",
        "kl_coef",
        "settings",
    ]
    weights = {k: v.clone() for k, v in first.model.state_dict().items()}
    moments = {k: v.clone() for k, v in first.optimizer.state_dict()["state"][0].items()}
    expected = first.state.state_dict()

    second = Trainer(make_cfg(f"trainer.output_dir={out}", "trainer.val_size=0"))
    assert second.state.step == 0 and not torch.equal(torch.get_rng_state(), rng)
    fresh = second.model.state_dict()
    assert any(not torch.equal(fresh[k], v) for k, v in weights.items())  # the step moved the policy
    assert second.restore()
    assert second.state.state_dict() == expected
    assert torch.equal(torch.get_rng_state(), rng)
    now = second.model.state_dict()
    assert all(torch.equal(now[k], v) for k, v in weights.items())
    restored = second.optimizer.state_dict()["state"][0]
    assert all(torch.equal(restored[k], v) for k, v in moments.items())
    # both go on with the same prompts
    assert second.state.sampler.next_batch() == first.state.sampler.next_batch()
