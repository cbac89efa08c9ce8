"""One RL step as a record passed through uniform stages (``trainer/step.py``, ``trainer/rounds.py``)."""

from __future__ import annotations

import pytest

from easyvideor1.trainer import rounds
from easyvideor1.trainer import step as stages
from easyvideor1.trainer.build import step_settings
from easyvideor1.trainer.loop import Trainer


def test_a_step_is_one_record_through_the_stages_in_the_readme_order(make_cfg, monkeypatch):
    """ReMax with an adaptive KL in the loss: the greedy baseline is generated in the collection,
    before the engine sleeps; every stage takes (context, step) and fills the same record; the
    update's KL coefficient is the controller's after this step fed it, and the step settings are
    the ones the config gives (nothing changed them)."""
    cfg = make_cfg(
        "algorithm.adv_estimator=REMAX",
        "algorithm.kl.type=k3",
        "algorithm.kl.apply_as=loss",
        "algorithm.kl.controller=adaptive",
        "algorithm.kl.horizon=4",
        "trainer.val_size=0",
    )
    trainer = Trainer(cfg)
    events: list[tuple[str, object]] = []

    def traced(module, name):
        own = getattr(module, name)

        def run(ctx, step, *args):
            events.append((name, step))
            return own(ctx, step, *args)

        monkeypatch.setattr(module, name, run)

    traced(rounds, "greedy_baseline")
    for name in ("logprobs", "shape", "advantages", "mask", "update", "metrics"):
        traced(stages, name)
    release = trainer.parts.handoff.release

    def released():
        events.append(("release", None))
        return release()

    monkeypatch.setattr(trainer.parts.handoff, "release", released)
    coefs = []
    own_update = stages.policy_update

    def update(forward, optimizer, scheduler, exp, mini, settings, kl_coef):
        coefs.append(kl_coef)
        return own_update(forward, optimizer, scheduler, exp, mini, settings, kl_coef)

    monkeypatch.setattr(stages, "policy_update", update)
    before = trainer.parts.kl_ctl.value
    m = trainer.rl_step()
    names = [name for name, _ in events]
    assert names.index("release") == 1  # the engine sleeps once the collection (baseline included) is over
    stage_names = [name for name in names if name != "release"]
    assert stage_names == ["greedy_baseline", "logprobs", "shape", "advantages", "mask", "update", "metrics"]
    record = events[0][1]
    assert all(step is record for name, step in events if name != "release")
    exp = record.experience
    assert record.greedy_scores is not None and record.greedy_scores.shape == (len(record.samples),)
    assert exp.old_logp is not None and exp.ref_logp is not None and exp.advantages is not None
    assert record.rewards is not None and record.entropy is not None and record.update_metrics
    assert set(record.times) == {"data", "rollout", "logprobs", "update", "step"}
    # the controller moved this step, and the loss took its new coefficient, read where it is used
    assert trainer.parts.kl_ctl.value != before
    assert coefs == [trainer.parts.kl_ctl.value] and m["actor/kl_coef"] == pytest.approx(coefs[0])
    assert trainer.settings == step_settings(cfg)
    trainer.close()
