"""Rollout correction in a real step (``algorithm.rollout_correction``) on the tiny Qwen3-VL: with
the engine's log-probs shifted by known amounts, each sampled token's weight is the truncated ratio
computed by hand from the step's logged log-probs; with an exact engine the weights are 1 and the
step is the uncorrected step."""

from __future__ import annotations

import pytest
import torch

from easyvideor1.trainer import step as stages
from easyvideor1.trainer.loop import Trainer

CAP = 1.5


def _shift_engine_logprobs(trainer: Trainer) -> None:
    """The engine reports log-probs off by a spread of known amounts (as another sampler would)."""
    engine = trainer.parts.engine
    own = engine.generate

    def generate(batch, repeats, sampling):
        out = own(batch, repeats, sampling)
        shift = torch.linspace(-0.8, 0.8, out.logprobs.numel()).reshape(out.logprobs.shape)
        out.logprobs = torch.where(out.mask.bool(), out.logprobs + shift, out.logprobs)
        return out

    engine.generate = generate


def _capture(monkeypatch) -> dict:
    seen: dict = {}
    real = stages.correct_rollouts

    def capture(alg, exp):
        seen["exp"], seen["metrics"] = exp, real(alg, exp)
        return seen["metrics"]

    monkeypatch.setattr(stages, "correct_rollouts", capture)
    return seen


def test_tis_weights_equal_a_hand_computation_from_the_logged_logprobs(make_cfg, monkeypatch):
    cfg = make_cfg(
        "algorithm.rollout_correction=tis", f"algorithm.rollout_correction_cap={CAP}", "trainer.val_size=0"
    )
    trainer = Trainer(cfg)
    _shift_engine_logprobs(trainer)
    seen = _capture(monkeypatch)
    m = trainer.rl_step()
    exp = seen["exp"]
    sampled = exp.mask.bool() & ~torch.isnan(exp.rollout_logp)
    assert sampled.sum() > 10
    hand = torch.ones_like(exp.old_logp)
    for i, j in sampled.nonzero().tolist():
        hand[i, j] = min(float(torch.exp(exp.old_logp[i, j] - exp.rollout_logp[i, j])), CAP)
    assert torch.allclose(exp.is_weights, hand, rtol=1e-6, atol=1e-7)
    assert m["rollout/is_weight_mean"] == pytest.approx(float(hand[sampled].mean()), rel=1e-6)
    clipped = float((torch.exp(exp.old_logp - exp.rollout_logp)[sampled] > CAP).float().mean())
    assert 0 < m["rollout/is_clipped_frac"] == pytest.approx(clipped)
    assert m["actor/grad_norm"] > 0


def test_with_an_exact_engine_the_correction_changes_nothing(make_cfg, monkeypatch):
    """The HF engine samples with the trainer's weights and kernels: rho = 1 within float error,
    so a ``tis`` step updates the weights as an uncorrected one does."""
    plain = Trainer(make_cfg("trainer.val_size=0", "algorithm.policy_loss=ppo"))
    p = plain.rl_step()
    seen = _capture(monkeypatch)
    corrected = Trainer(make_cfg("algorithm.rollout_correction=tis", "trainer.val_size=0"))
    c = corrected.rl_step()
    w = seen["exp"].is_weights[seen["exp"].mask.bool()]
    assert (w - 1).abs().max() < 1e-5
    assert c["actor/pg_loss"] == pytest.approx(p["actor/pg_loss"], abs=1e-6)
    assert c["actor/grad_norm"] == pytest.approx(p["actor/grad_norm"], rel=1e-4)
    # Adam's first step moves each weight by about lr (1e-3) whatever the gradient's size: the
    # weights agree to a small fraction of that
    a, b = plain.parts.model.state_dict(), corrected.parts.model.state_dict()
    assert max(float((a[k].float() - b[k].float()).abs().max()) for k in a) < 1e-4


def test_mis_drops_tokens_from_the_loss_but_not_from_the_forward(make_cfg, monkeypatch):
    """A token ``mis`` drops leaves the loss mask only: the forward still attends it, so the tokens
    after it keep their log-probs."""
    trainer = Trainer(make_cfg("algorithm.rollout_correction=mis", "trainer.val_size=0"))
    _shift_engine_logprobs(trainer)
    seen = _capture(monkeypatch)
    trainer.rl_step()
    exp = seen["exp"]
    dropped = exp.real.bool() & ~exp.mask.bool()
    assert dropped.any() and seen["metrics"]["rollout/is_clipped_frac"] > 0
    assert bool((exp.is_weights[dropped] == 0).all())
