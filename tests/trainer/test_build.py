"""Start-up of ``trainer/build.py``: vLLM engine settings that could not follow ``LOCAL_RANK``
under torchrun (every rank's engine would land on one GPU) are refused by key; the step's sampling
is the rollout section's own, so every sampling key reaches the engine in training."""

from __future__ import annotations

import pytest
import torch

from easyvideor1.config import RunConfig, load_config
from easyvideor1.trainer.build import check_engine_per_rank, step_settings


@pytest.mark.parametrize(
    "override, message",
    [
        ("rollout.vllm.tensor_parallel_size=2", "tensor_parallel_size=2 under torchrun"),
        ("rollout.vllm.in_process=false", "in_process=false under torchrun"),
    ],
)
def test_engine_settings_that_cannot_follow_local_rank_are_refused(override, message) -> None:
    with pytest.raises(ValueError, match=message):
        check_engine_per_rank(load_config(RunConfig, None, ["rollout.engine=vllm", override]))
    check_engine_per_rank(load_config(RunConfig, None, ["rollout.engine=vllm"]))  # one engine per rank


def test_training_and_validation_sample_with_every_rollout_key() -> None:
    """``step_settings``: the rollout section's own sampling, every key (validation at
    ``val_temperature``), not a hand-made copy of some of them."""
    cfg = load_config(
        RunConfig,
        None,
        [
            "rollout.min_new_tokens=8",
            "rollout.presence_penalty=0.5",
            "rollout.top_k=7",
            "rollout.val_temperature=0.3",
        ],
    )
    settings = step_settings(cfg)
    assert settings.sampling == cfg.rollout.sampling(return_logprobs=False)
    assert settings.val_sampling == cfg.rollout.sampling(temperature=0.3)
    for s in (settings.sampling, settings.val_sampling):
        assert (s.min_new_tokens, s.presence_penalty, s.top_k) == (8, 0.5, 7)


def _rollout_lengths(cfg) -> list[int]:
    """Train ``cfg`` (a warm-up on the records' short offline answers, then one RL step) and return
    the number of tokens before the end of turn of every response the engine sampled for training."""
    from easyvideor1.trainer.loop import Trainer

    trainer = Trainer(cfg)
    generate, lengths = trainer.parts.engine.generate, []

    def recorded(batch, repeats, sampling):
        out = generate(batch, repeats, sampling)
        if sampling.temperature > 0:  # training rollouts (validation is greedy)
            ended = torch.tensor([not t for t in out.truncated], dtype=torch.long)
            lengths.extend((out.mask.sum(1) - ended).tolist())  # the end-of-turn token not counted
        return out

    trainer.parts.engine.generate = recorded
    trainer.train()
    trainer.close()
    return lengths


def test_rollout_min_new_tokens_holds_in_training(make_cfg, tmp_path) -> None:
    """``rollout.min_new_tokens=8``: no training response ends before 8 tokens, where the same run
    without it (a policy warmed up to answer in a few tokens) ends responses earlier."""
    warm = ["trainer.sft_warmup_steps=12", "trainer.sft_batch_size=8", "trainer.sft_lr=3e-3"]
    run = ["trainer.max_steps=1", "rollout.max_new_tokens=16", *warm]
    free = _rollout_lengths(make_cfg(*run, f"trainer.output_dir={tmp_path / 'free'}"))
    assert min(free) < 8, "the warmed-up policy answers in fewer than 8 tokens without the setting"
    held = _rollout_lengths(
        make_cfg(*run, "rollout.min_new_tokens=8", f"trainer.output_dir={tmp_path / 'min'}")
    )
    assert len(held) == len(free) > 0 and min(held) >= 8, held


def test_the_trainer_finishes_the_config_once_and_changes_nothing(make_cfg) -> None:
    """``Trainer(cfg)`` trains on the resolved config (the checkpoint names the family) and neither
    the config it was given nor the finished one changes while it starts, trains and validates."""
    from easyvideor1.config import to_yaml
    from easyvideor1.trainer.loop import Trainer

    cfg = make_cfg("trainer.max_steps=1")
    given = to_yaml(cfg)
    trainer = Trainer(cfg)
    finished = to_yaml(trainer.cfg)
    assert cfg.data.model_family is None and trainer.cfg.data.model_family == "qwen3_vl"
    trainer.train()
    trainer.close()
    assert to_yaml(cfg) == given, "the caller's config is not changed"
    assert to_yaml(trainer.cfg) == finished, "the finished config is not changed while the run goes"
