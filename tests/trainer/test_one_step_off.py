"""``rollout.mode=one_step_off`` on the tiny Qwen3-VL: the next step's rollouts are generated
during this step's update with the weights from before it (the HF engine on its own copy)."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from easyvideor1.trainer import step as stages
from easyvideor1.trainer.ahead import RolloutsAhead
from easyvideor1.trainer.loop import Trainer

QUIET = ("trainer.val_size=0", "trainer.max_steps=3")


def _trained_prompts(trainer: Trainer) -> list[list[str]]:
    """Records out: the problem ids each step trains on (in the order the steps consume them)."""
    seen: list[list[str]] = []
    own = trainer._rollouts

    def rollouts():
        step = own()
        seen.append([s.record.problem_id for s in step.samples])
        return step

    trainer._rollouts = rollouts
    return seen


@pytest.mark.parametrize("mode", ["one_step_off", "async"])
def test_max_staleness_0_gives_the_weights_of_sync(make_cfg, mode):
    sync = Trainer(make_cfg(*QUIET))
    sync.train()
    fresh = Trainer(make_cfg(*QUIET, f"rollout.mode={mode}", "rollout.max_staleness=0"))
    m = fresh.train()
    a, b = sync.parts.model.state_dict(), fresh.parts.model.state_dict()
    assert max(float((a[k] - b[k]).abs().max()) for k in a) <= 1e-6
    assert fresh.engine_version == 3 and m is not None


def test_staleness_1_trains_each_batch_on_the_weights_one_update_old(make_cfg, monkeypatch):
    # responses of up to 32 tokens (the tiny untrained model rarely ends one early): a generation
    # lasts longer than the log-prob forwards before the update, so the batch generated ahead is
    # still being generated when the update starts. Not rollout.min_new_tokens: the engine would
    # sample with the end-of-turn token suppressed, and its log-probs would rightly differ from the
    # trainer's, which the sync step's check below compares.
    trainer = Trainer(
        make_cfg(
            *QUIET,
            "rollout.mode=one_step_off",
            "algorithm.rollout_correction=tis",
            "rollout.max_new_tokens=32",
        )
    )
    assert trainer.parts.engine.owns_weights  # a copy to generate with during the update
    prompts = _trained_prompts(trainer)
    exps = []
    real = stages.correct_rollouts

    def capture(alg, exp):
        exps.append(exp)
        return real(alg, exp)

    monkeypatch.setattr(stages, "correct_rollouts", capture)
    # when generation and updates run: the next batch is sampled while the update runs
    events: list[tuple[str, float, float]] = []
    own_generate, own_update = trainer.parts.engine.generate, stages.update

    def timed(kind, fn):
        def run(*args, **kwargs):
            t = time.perf_counter()
            out = fn(*args, **kwargs)
            events.append((kind, threading.current_thread().name, t, time.perf_counter()))
            return out

        return run

    trainer.parts.engine.generate = timed("generate", own_generate)
    monkeypatch.setattr(stages, "update", timed("update", own_update))
    # the job generating a batch ahead (weights handed over, prompts loaded, then sampled): timed as
    # a whole, since on a loaded machine its loading alone can outlast a tiny model's update
    monkeypatch.setattr(RolloutsAhead, "_run", timed("ahead", RolloutsAhead._run))
    trainer.train()
    updates = [(t0, t1) for kind, _, t0, t1 in events if kind == "update"]
    ahead = [(t0, t1) for kind, _, t0, t1 in events if kind == "ahead"]
    sampled_ahead = [
        name for kind, name, *_ in events if kind == "generate" and name.startswith("rollouts-ahead")
    ]
    assert len(updates) == 3 and len(ahead) == len(sampled_ahead) == 2  # steps 1, 2 make the next batch
    for (u0, u1), (a0, a1) in zip(updates, ahead, strict=False):  # step k's update and its batch ahead
        assert a0 < u1 and u0 < a1, events
    rows = [h for h in trainer.history if "reward/overall" in h]
    assert len(rows) == 3
    metrics = _metrics(trainer)
    assert [m["rollout/staleness_max"] for m in metrics] == [0.0, 1.0, 1.0]  # the first has none ahead
    # the sync step's engine log-probs equal the trainer's; a stale batch's do not (one update apart)
    assert metrics[0]["rollout/logprob_gap_max"] < 1e-4 < metrics[1]["rollout/logprob_gap_max"]
    # tis weights: pi_old / pi_rollout from the step's logged log-probs, truncated at the cap (2)
    exp = exps[1]
    sampled = exp.mask.bool() & ~torch.isnan(exp.rollout_logp)
    hand = torch.exp(exp.old_logp - exp.rollout_logp).clamp(max=2.0)
    assert torch.allclose(exp.is_weights[sampled], hand[sampled], rtol=1e-6)
    assert metrics[1]["rollout/is_weight_mean"] == pytest.approx(float(hand[sampled].mean()), rel=1e-6)
    # every step trained different prompts: the batch generated ahead is the next draw, used once
    assert len({p for step in prompts for p in step}) == sum(len(s) for s in prompts)


def _metrics(trainer: Trainer) -> list[dict]:
    import json
    import os

    path = os.path.join(trainer.cfg.trainer.output_dir, "metrics.jsonl")
    rows = [json.loads(line) for line in open(path)]
    return [r for r in rows if "actor/pg_loss" in r]


def test_a_resumed_run_trains_no_prompt_twice_and_loses_none(make_cfg, tmp_path):
    """At the step-2 checkpoint step 3's rollouts are already generated (ahead): they are not saved,
    the sampler is saved from before their draw, so the run resumed there draws the same prompts
    again (on the restored weights) and trains exactly the straight run's steps 3 and 4."""
    ahead = ("rollout.mode=one_step_off", "trainer.val_size=0", "trainer.max_steps=4", "trainer.save_every=2")
    straight = Trainer(make_cfg(*ahead, f"trainer.output_dir={tmp_path / 'a'}"))
    whole = _trained_prompts(straight)
    straight.train()
    checkpoint = tmp_path / "a" / "checkpoints" / "step_2"
    resumed = Trainer(
        make_cfg(*ahead, f"trainer.output_dir={tmp_path / 'b'}", f"trainer.resume={checkpoint}")
    )
    after = _trained_prompts(resumed)
    resumed.train()
    assert len(whole) == 4 and after == whole[2:]


@pytest.mark.parametrize(
    "settings,message",
    [
        (("rollout.max_staleness=1",), "rollout.max_staleness applies to rollout.mode=one_step_off"),
        (
            ("rollout.mode=async", "rollout.max_staleness=9"),
            r"rollout.max_staleness must be a whole number in \[0, 8\]",
        ),
        (
            ("rollout.mode=one_step_off", "rollout.on_stale=drop"),
            "rollout.on_stale drop applies to rollout.mode=async",
        ),
        (
            ("rollout.mode=one_step_off", "rollout.max_staleness=2"),
            r"rollout.max_staleness must be in \[0, 1\]",
        ),
        (
            ("rollout.mode=one_step_off", "rollout.engine=vllm", "rollout.vllm.sleep_between_phases=true"),
            "rollout.vllm.sleep_between_phases must be false",
        ),
        (
            ("rollout.engine=vllm", "rollout.placement=separate"),
            "rollout.placement separate runs the HF engine",
        ),
    ],
)
def test_bad_settings_are_refused_naming_the_key(make_cfg, settings, message):
    with pytest.raises(ValueError, match=message):
        Trainer(make_cfg(*settings))


def test_episodes_hybrid_groups_and_dynamic_sampling_run_one_step_off(make_cfg, turns_file):
    """The batch generated ahead is a whole step's collection: episodes with tool calls, offline
    multi-turn trajectories in the groups, and DAPO's refill rounds, all on the stale weights."""
    trainer = Trainer(
        make_cfg(
            *QUIET,
            f"data.train_files=[{turns_file}]",
            "rollout.mode=one_step_off",
            "rollout.hybrid=always",
            "rollout.max_new_tokens=160",  # the offline turns: a seek call, then the answer
            "tools.names=[seek]",
            "tools.seek_max_pixels=4096",
            "tools.max_episode_tokens=2048",
            "algorithm.online_filtering.enable=true",
            "algorithm.online_filtering.max_tries=3",
        )
    )
    trainer.train()
    metrics = _metrics(trainer)
    assert [m["rollout/staleness_max"] for m in metrics] == [0.0, 1.0, 1.0]
    assert all(m["hybrid/groups_with_offline"] > 0 for m in metrics)
    assert all(m["actor/skipped_steps"] == 0 for m in metrics)


def _slow_updates(monkeypatch, seconds: float) -> None:
    """Updates that outlast the generation of every batch in flight: the timing the tests below
    describe no longer depends on the machine's load."""
    own = stages.update

    def slow(*args, **kwargs):
        time.sleep(seconds)
        return own(*args, **kwargs)

    monkeypatch.setattr(stages, "update", slow)


def test_async_keeps_k_batches_in_flight_each_within_the_bound(make_cfg, monkeypatch):
    """``async`` with max_staleness 2: step 0's update starts with steps 1 and 2 in flight, both
    sampled on the initial weights (staleness 1 and 2); step 3's batch starts on step 0's weights
    once they are pushed (staleness 2). Validation runs on the current weights."""
    _slow_updates(monkeypatch, 1.5)
    trainer = Trainer(
        make_cfg(
            "trainer.max_steps=4", "rollout.mode=async", "rollout.max_staleness=2", "trainer.val_every=2"
        )
    )
    prompts = _trained_prompts(trainer)
    versions = []
    own_validate = trainer.validate

    def validate(probes=False):
        out = own_validate(probes)
        versions.append((trainer.state.step, trainer.parts.handoff.version))
        return out

    trainer.validate = validate
    trainer.train()
    metrics = _metrics(trainer)
    assert [m["rollout/staleness_max"] for m in metrics] == [0.0, 1.0, 2.0, 2.0]
    assert all(m["rollout/dropped_stale"] == 0 for m in metrics)
    assert versions == [(0, 0), (2, 2), (4, 4)]  # before training, at step 2, the final one
    assert len({p for step in prompts for p in step}) == sum(len(s) for s in prompts)


def test_async_drop_gives_a_too_stale_batch_back_and_counts_it(make_cfg, monkeypatch):
    """``on_stale=drop``, max_staleness 1: two batches in flight. Both ahead of step 0's update are
    sampled on the initial weights; at step 2 the second is two updates old: dropped (its
    prompts counted and given back to the sampler), and step 2, the last, trains a batch sampled
    afresh on the current weights instead (staleness 0)."""
    _slow_updates(monkeypatch, 1.5)
    trainer = Trainer(
        make_cfg(*QUIET, "rollout.mode=async", "rollout.max_staleness=1", "rollout.on_stale=drop")
    )
    dropped: list[list[int]] = []
    own_requeue = trainer.state.sampler.requeue

    def requeue(indices, front=False):
        dropped.append(list(indices))
        return own_requeue(indices, front)

    trainer.state.sampler.requeue = requeue
    trainer.train()
    metrics = _metrics(trainer)
    assert [m["rollout/staleness_max"] for m in metrics] == [0.0, 1.0, 0.0]
    share = trainer.cfg.trainer.prompts_per_step
    assert [m["rollout/dropped_stale"] for m in metrics] == [0.0, 0.0, float(share)]
    assert len(dropped) == 1 and len(dropped[0]) == share


def test_the_engine_in_its_own_process_trains_one_step_off(make_cfg):
    """``rollout.placement=separate``: a child process generates (no copy in the trainer), gets
    the weights after each update, and its log-probs equal the trainer's on the same weights."""
    from easyvideor1.rollout.remote import RemoteHFEngine

    trainer = Trainer(make_cfg(*QUIET, "rollout.placement=separate", "rollout.mode=one_step_off"))
    try:
        assert isinstance(trainer.parts.engine, RemoteHFEngine) and trainer.parts.rollout_model is None
        trainer.train()
        metrics = _metrics(trainer)
        assert [m["rollout/staleness_max"] for m in metrics] == [0.0, 1.0, 1.0]
        assert metrics[0]["rollout/logprob_gap_max"] < 1e-4 < metrics[1]["rollout/logprob_gap_max"]
        assert trainer.engine_version == 3
    finally:
        trainer.close()
