"""``data.prefetch``: the next draw's media load in a background thread while a step trains, and
a run with it draws, samples, rewards and trains exactly as one without it."""

from __future__ import annotations

import dataclasses
import threading

import pytest
import torch

from easyvideor1.trainer import prefetch
from easyvideor1.trainer.sampler import PromptSampler


def test_peeking_draws_nothing():
    sampler = PromptSampler(5, 2, seed=3)
    sampler.next_batch()
    sampler.requeue([4])
    state = sampler.state_dict()
    for _ in range(4):  # across an epoch boundary, given-back prompts first
        ahead = sampler.peek_batch()
        assert sampler.state_dict() == state
        assert sampler.next_batch() == ahead
        state = sampler.state_dict()


def _run(make_cfg, mp, on: bool):
    """Two sync RL steps: each step's drawn problem ids and batch, metrics (times left out), the
    weights after, and the threads that loaded media ahead (or that a draw encoded its own)."""
    from easyvideor1.trainer.loop import Trainer

    loads: list[str] = []
    original = prefetch.load_media

    def load(*args):
        loads.append(threading.current_thread().name)
        return original(*args)

    mp.setattr(prefetch, "load_media", load)
    from easyvideor1.trainer import draws as drawing

    encode = drawing.encode_prompts

    def encoded_when_drawn(*args):
        loads.append("encoded when drawn")
        return encode(*args)

    mp.setattr(drawing, "encode_prompts", encoded_when_drawn)
    trainer = Trainer(
        make_cfg(f"data.prefetch={str(on).lower()}", "trainer.val_size=0", "trainer.resume=never")
    )
    drawn, metrics = [], []
    draw = trainer.draws.next

    def record(draws=None):
        samples, batch = draw(draws)
        drawn.append(([s.record.problem_id for s in samples], batch))
        return samples, batch

    trainer.context = dataclasses.replace(trainer.context, draw=record)
    for _ in range(2):
        m = trainer.rl_step()
        metrics.append({k: v for k, v in m.items() if not k.startswith(("time/", "perf/", "memory/"))})
        trainer.state.step += 1
    weights = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    trainer.close()
    return drawn, metrics, weights, loads


def test_a_run_with_prefetch_equals_one_without(make_cfg, monkeypatch):
    with monkeypatch.context() as mp:
        on = _run(make_cfg, mp, True)
    with monkeypatch.context() as mp:
        off = _run(make_cfg, mp, False)
    (drawn_on, metrics_on, weights_on, loads_on), (drawn_off, metrics_off, weights_off, loads_off) = on, off
    assert [ids for ids, _ in drawn_on] == [ids for ids, _ in drawn_off]
    for (_, a), (_, b) in zip(drawn_on, drawn_off, strict=True):
        assert a.inputs.keys() == b.inputs.keys()
        assert all(torch.equal(a.inputs[k], b.inputs[k]) for k in a.inputs)
    assert metrics_on == metrics_off  # rewards, losses, KL, entropies: every number
    assert all(torch.equal(weights_on[k], weights_off[k]) for k in weights_on)
    # the second step's media were loaded and encoded by the worker, during the first step
    worker = f"{prefetch.THREAD_NAME}_0"
    assert loads_on.count("encoded when drawn") == 1 and set(loads_on) == {worker, "encoded when drawn"}
    assert loads_off == ["encoded when drawn"] * 2


@pytest.mark.parametrize("mode", ["one_step_off"])
def test_modes_that_draw_ahead_do_not_prefetch(make_cfg, mode):
    from easyvideor1.trainer.loop import Trainer

    trainer = Trainer(
        make_cfg(f"rollout.mode={mode}", "data.prefetch=true", "trainer.val_size=0", "trainer.resume=never")
    )
    try:
        assert trainer.draws.prefetch is None
    finally:
        trainer.close()
