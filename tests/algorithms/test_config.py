"""AlgorithmConfig: defaults, validation with clear errors, OmegaConf round trip, option plumbing."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from easyvideor1.algorithms import (
    AdaptiveKLController,
    AlgorithmConfig,
    FixedKLController,
    KLConfig,
    OnlineFilterConfig,
    OverlongConfig,
    UnknownAlgorithmError,
    compute_advantages,
    compute_policy_loss,
)


def test_defaults_are_grpo_with_dapo_clip_higher() -> None:
    cfg = AlgorithmConfig()
    assert (cfg.adv_estimator, cfg.policy_loss, cfg.loss_agg_mode) == ("grpo", "ppo", "token-mean")
    assert cfg.policy_loss_options() == {
        "clip_ratio_low": 0.2,
        "clip_ratio_high": 0.28,
        "clip_ratio_dual": 3.0,
    }
    assert cfg.norm_adv_by_std and not cfg.adv_std_unbiased and cfg.adv_eps == 1e-6
    assert cfg.gdpo_reward_keys == ["accuracy", "format"]
    assert not cfg.kl.enabled and not cfg.online_filtering.enable and not cfg.overlong.enable
    assert (cfg.online_filtering.low, cfg.online_filtering.high, cfg.online_filtering.max_tries) == (
        0.01,
        0.99,
        20,
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"adv_estimator": "grop"}, UnknownAlgorithmError, "did you mean 'grpo'"),
        ({"policy_loss": "ppo2"}, UnknownAlgorithmError, "known: cispo"),
        ({"loss_agg_mode": "token-median"}, ValueError, "unknown loss_agg_mode"),
        ({"loss_options": {"clip_ratio_low": 1.0}}, ValueError, "loss_options.clip_ratio_low"),
        ({"loss_options": {"clip_ratio_high": -0.1}}, ValueError, "loss_options.clip_ratio_high"),
        ({"loss_options": {"clip_ratio_dual": 1.0}}, ValueError, "loss_options.clip_ratio_dual"),
        ({"loss_options": {"clip_ratio_lo": 0.1}}, ValueError, "no registered policy loss takes"),
        ({"gamma": 1.5}, ValueError, "gamma"),
        ({"adv_eps": 0.0}, ValueError, "adv_eps"),
        ({"loss_norm_length": 0}, ValueError, "loss_norm_length"),
        ({"adv_estimator": "gdpo", "gdpo_reward_keys": []}, ValueError, "gdpo_reward_keys"),
    ],
)
def test_invalid_values_fail_with_clear_errors(kwargs, error, message) -> None:
    with pytest.raises(error, match=message):
        AlgorithmConfig(**kwargs)


@pytest.mark.parametrize(
    ("cls", "kwargs", "message"),
    [
        (KLConfig, {"type": "full"}, "unknown KL estimator 'full'"),
        (KLConfig, {"coef": -1.0}, "kl.coef"),
        (KLConfig, {"apply_as": "both"}, "kl.apply_as"),
        (KLConfig, {"controller": "pid"}, "kl.controller"),
        (OnlineFilterConfig, {"criterion": "var"}, "criterion"),
        (OnlineFilterConfig, {"low": 0.9, "high": 0.1}, "low"),
        (OverlongConfig, {"buffer": 0}, "buffer"),
        (OverlongConfig, {"max_length": 100, "buffer": 200}, "max_length"),
        (OverlongConfig, {"factor": -1.0}, "factor"),
    ],
)
def test_invalid_sections(cls, kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        cls(**kwargs)


def test_agg_mode_is_normalised_and_names_keep_aliases() -> None:
    cfg = AlgorithmConfig(
        loss_agg_mode="seq_mean_token_sum_norm", adv_estimator="reinforce++", policy_loss="vanilla"
    )
    assert cfg.loss_agg_mode == "seq-mean-token-sum-norm"


def test_omegaconf_structured_round_trip_with_overrides() -> None:
    base = OmegaConf.structured(AlgorithmConfig)
    merged = OmegaConf.merge(
        base,
        OmegaConf.from_dotlist(
            ["adv_estimator=dr_grpo", "kl.type=k3", "kl.apply_as=reward", "loss_options.clip_ratio_dual=null"]
        ),
    )
    cfg = OmegaConf.to_object(merged)
    assert isinstance(cfg, AlgorithmConfig) and isinstance(cfg.kl, KLConfig)
    assert (
        cfg.adv_estimator,
        cfg.kl.type,
        cfg.kl.apply_as,
        cfg.policy_loss_options()["clip_ratio_dual"],
    ) == (
        "dr_grpo",
        "k3",
        "reward",
        None,
    )
    with pytest.raises(UnknownAlgorithmError):
        OmegaConf.to_object(OmegaConf.merge(base, OmegaConf.from_dotlist(["policy_loss=nope"])))


def test_options_reach_the_algorithms() -> None:
    cfg = AlgorithmConfig(
        norm_adv_by_std=False,
        adv_std_unbiased=True,
        loss_options={"clip_ratio_high": 0.5, "clip_ratio_dual": None},
    )
    adv = compute_advantages(
        cfg.adv_estimator, torch.tensor([0.0, 1.0]), torch.ones(2, 1), [0, 0], **cfg.advantage_options()
    )
    assert adv.advantages.flatten().tolist() == [-0.5, 0.5]  # norm_by_std=False reached grpo
    logp = torch.zeros(1, 2)
    old = torch.log(torch.tensor([[1 / 1.6, 1 / 10.0]]))  # ratios 1.6 and 10
    out = compute_policy_loss(
        cfg.policy_loss, logp, old, torch.tensor([[1.0, -1.0]]), torch.ones(1, 2), **cfg.policy_loss_options()
    )
    assert out.loss.tolist()[0] == pytest.approx([-1.5, 10.0])  # clip at 1 + 0.5; dual clip disabled


def test_kl_controller_factory() -> None:
    assert isinstance(AlgorithmConfig().make_kl_controller(), FixedKLController)
    adaptive = AlgorithmConfig(kl=KLConfig(type="k3", controller="adaptive", coef=0.05)).make_kl_controller()
    assert isinstance(adaptive, AdaptiveKLController) and adaptive.value == 0.05
