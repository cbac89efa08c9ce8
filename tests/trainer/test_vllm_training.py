"""Training with ``rollout.engine=vllm``: the engine follows the trainer's weights.

A run trains 2 steps at a high learning rate with vLLM rollouts and validates greedily with the same
engine at the end. Its final validation generations must equal HF greedy generation from the saved
checkpoint (the weights the engine should have), and differ from the initial model's (so an engine
left on the starting weights would fail). One subprocess for the run (vLLM changes process state).
"""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from .conftest import base_overrides, train_in_subprocess

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed"),
]


def _greedy(model_dir, cfg, indices) -> list[str]:
    from easyvideor1.data.dataset import RecordDataset, encode_prompts
    from easyvideor1.models.loading import load_policy
    from easyvideor1.resolve import resolve_data
    from easyvideor1.rollout.base import SamplingConfig
    from easyvideor1.rollout.hf import HFRolloutEngine

    model, processor = load_policy(str(model_dir))
    engine = HFRolloutEngine(model, processor)
    data_cfg = resolve_data(cfg.data, str(model_dir))  # the checkpoint names the family, as in training
    data = RecordDataset.from_files(cfg.data.val_files, data_cfg)
    samples = [data[i] for i in indices]
    out = engine.generate(
        encode_prompts(processor, samples, data_cfg, data.loader),
        [1] * len(samples),
        SamplingConfig(temperature=0, max_new_tokens=cfg.rollout.max_new_tokens),
    )
    return out.texts


@pytest.mark.parametrize("ranks", [1, 2])
def test_vllm_rollouts_follow_the_trainer_weights(make_cfg, demo_assets, tmp_path, monkeypatch, ranks):
    """With 2 torchrun ranks each rank runs its own in-process engine, fed from FSDP2 shards. The
    one-process run compiles the engine's model with inductor, as vLLM does on a CPU outside its CI
    (tests/conftest.py), so the pushed weights are shown to reach a compiled model too."""
    if ranks == 1:
        monkeypatch.setenv("VLLM_CPU_CI_ENV", "0")
    out = tmp_path / "run"
    overrides = [
        *base_overrides(demo_assets, out),
        "rollout.engine=vllm",
        "rollout.vllm.dtype=float32",  # the tiny model trains in fp32: the engine computes as it does
        "rollout.hybrid=always",  # a correct offline answer in every group: non-zero advantages
        "trainer.mini_batch_prompts=4",
        "trainer.lr=2e-2",
        "trainer.val_size=8",
    ]
    r = train_in_subprocess(overrides, ranks)
    assert "Traceback" not in r.stderr  # shutdown included (vLLM tears its groups down first)
    # each rank's engine on its own device, with the executor that follows LOCAL_RANK under torchrun
    executor = "external_launcher" if ranks > 1 else "uni"
    for rank in range(ranks):
        assert (
            f"rank {rank}: vLLM engine on cpu with the {executor} executor, weights in torch.float32"
            in r.stderr
        )
    rows = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    final = [g for g in rows if g["step"] == 2]
    assert final, rows
    cfg = make_cfg(*overrides)
    indices = [g["index"] for g in final]
    trained = _greedy(out / "checkpoints" / "step_2", cfg, indices)
    initial = _greedy(demo_assets["model"], cfg, indices)
    vllm_texts = [g["response"] for g in final]
    # every rank validated its own share (val_idx[rank::ranks]) with its own engine, on the pushed weights
    assert vllm_texts == trained and len(final) == 8
    assert vllm_texts != initial  # the update changed greedy outputs: stale engine weights would show
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics if "actor/pg_loss" in m] == [1, 2]
    # the engine's sampled-token log-probs equal the trainer's at every step (weights in sync)
    gaps = [m["rollout/logprob_gap_max"] for m in metrics if "rollout/logprob_gap_max" in m]
    assert len(gaps) == 2 and max(gaps) < 1e-4, gaps
    assert all(torch.isfinite(torch.tensor(m["actor/pg_loss"])) for m in metrics if "actor/pg_loss" in m)


def test_vllm_rollouts_run_episodes_the_trainer_recomputes(make_cfg, demo_assets, turns_file, tmp_path):
    """``rollout.engine=vllm`` with tools: a short warm-up on offline seek episodes teaches the call,
    pushed to the engine; then vLLM's own episodes (rollouts and validation) call the tool, their tool turns are appended as
    token ids, and the trainer's forward over whole episodes recomputes vLLM's log-probs."""
    out = tmp_path / "run"
    overrides = [
        *base_overrides(demo_assets, out),
        f"data.train_files=[{turns_file}]",
        "rollout.engine=vllm",
        "rollout.vllm.dtype=float32",  # the tiny model trains in fp32: the engine computes as it does
        "rollout.hybrid=always",
        "rollout.max_new_tokens=48",
        "tools.names=[seek]",
        "tools.seek_max_pixels=4096",
        "tools.max_episode_tokens=2048",
        "trainer.sft_warmup_steps=40",
        "trainer.sft_batch_size=8",
        "trainer.sft_lr=2e-3",
    ]
    train_in_subprocess(overrides)
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if "actor/pg_loss" in m]
    assert [m["step"] for m in steps] == [1, 2]
    # after the warm-up (pushed to the engine), vLLM's own episodes call seek: the greedy validation
    # and the first step's rollouts, whose tool turns the trainer then recomputes
    warm = next(m for m in metrics if "val/tool_call_rate_after_warmup" in m)
    assert warm["val/tool_call_rate_after_warmup"] > 0 and steps[0]["tools/call_rate"] > 0
    rows = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    assert any(c["status"] == "ok" for g in rows if g["step"] == 0 for c in g.get("calls", []))
    assert all(m["rollout/logprob_gap_max"] < 1e-4 for m in steps), [
        m["rollout/logprob_gap_max"] for m in steps
    ]
