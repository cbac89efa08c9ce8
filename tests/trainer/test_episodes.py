"""RL steps whose rollouts are episodes (``tools.names``) on the tiny Qwen3-VL and the demo's videos.
Half the episodes open with a scripted ``seek`` call (an offline first turn; a trained tool user is
the demo's); every other turn, those after the tool results included, is the model's own sample."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from easyvideor1.models.inputs import PromptBatch, gather_prompts
from easyvideor1.models.logprobs import Packing, PolicyForward
from easyvideor1.rollout.base import Responses
from easyvideor1.trainer import update
from easyvideor1.trainer.loop import Trainer
from easyvideor1.trainer.rounds import collect_step

from .conftest import CALL

TOOLS = (
    "tools.names=[seek,frame_at]",
    "tools.seek_max_pixels=4096",
    "tools.max_episode_tokens=2048",
    "rollout.hybrid=always",  # an offline response per group: rewards that differ, a gradient
)


def script_first_turns(trainer: Trainer) -> None:
    """Every other episode's first turn is ``CALL``; every turn the model samples returns its
    log-probs (compared with the trainer's below). Episodes advance in batches: each row of a
    batch is scripted or left to the model on its own."""
    engine, tok = trainer.parts.engine, trainer.parts.processor.tokenizer
    own, seen = engine.generate, [0]
    call = tok(CALL, add_special_tokens=False)["input_ids"] + [engine.eos_ids[0]]

    def generate(batch, repeats, sampling):
        scripted = []
        for r in range(len(batch)):
            if "<tool_response>" not in tok.decode(batch.inputs["input_ids"][r]):
                seen[0] += 1
                scripted.append(seen[0] % 2 == 1)
            else:
                scripted.append(False)
        rows: list = [None] * len(batch)
        mine = [r for r in range(len(batch)) if not scripted[r]]
        if mine:
            counts = ([batch.video_counts[r] for r in mine], [batch.image_counts[r] for r in mine])
            out = own(
                PromptBatch(gather_prompts(batch, mine), *counts),
                [1] * len(mine),
                sampling.sampling(return_logprobs=True),
            )
            for k, r in enumerate(mine):
                n = int(out.mask[k].sum())
                rows[r] = (out.ids[k, :n], out.texts[k], out.truncated[k], out.logprobs[k, :n])
        for r in range(len(batch)):
            if scripted[r]:
                rows[r] = (torch.tensor(call), CALL, False, torch.full((len(call),), float("nan")))
        width = max(len(x[0]) for x in rows)
        ids = torch.full((len(rows), width), engine.pad_id)
        mask, logp = torch.zeros_like(ids), torch.full((len(rows), width), float("nan"))
        for r, (i, _, _, lp) in enumerate(rows):
            ids[r, : len(i)], mask[r, : len(i)], logp[r, : len(i)] = i, 1, lp
        return Responses(
            ids=ids, mask=mask, texts=[x[1] for x in rows], truncated=[x[2] for x in rows], logprobs=logp
        )

    engine.generate = generate


def _rollouts(trainer: Trainer):
    """One step's experience (rollouts scored, before log-probs and advantages)."""
    return collect_step(trainer.context, trainer.engine_version).experience


def test_an_episode_step_trains_on_the_policy_tokens_with_every_frame_in_the_forward(make_cfg):
    trainer = Trainer(make_cfg(*TOOLS, "trainer.val_size=0"))
    script_first_turns(trainer)
    m = trainer.rl_step()
    assert m["tools/calls_per_episode"] == pytest.approx(0.5, abs=0.25) and m["tools/call_rate"] >= 0.25
    assert m["tools/invalid_calls"] == 0 and m["tools/errors"] == 0
    assert m["actor/grad_norm"] > 0 and m["actor/skipped_steps"] == 0
    # the trainer's forward over whole episodes (tool frames and M-RoPE positions included)
    # recomputes the engine's own log-probs, turns after a tool result included
    assert m["rollout/logprob_gap_max"] < 1e-4


def test_tool_result_tokens_get_exactly_zero_gradient(make_cfg):
    trainer = Trainer(make_cfg(*TOOLS, "trainer.val_size=0"))
    script_first_turns(trainer)
    parts = trainer.parts
    exp = _rollouts(trainer)
    called = [i for i in range(len(exp)) if exp.response_media[i]]
    assert called, "some episodes called the tool"
    i = called[0]
    tool = (exp.valid[i] == 1) & (exp.mask[i] == 0)
    assert tool.any() and exp.mask[i].any()
    logits = {}

    def keep(module, args, out):
        out.retain_grad()
        logits["out"] = out

    hook = parts.model.lm_head.register_forward_hook(keep)
    try:
        rows, mask, width = update.response_rows(exp, [i])
        logp, _ = _forward(parts).logprobs(rows)
        (logp * mask).sum().backward()  # the loss's token weights: the policy's tokens only
    finally:
        hook.remove()
    grad = logits["out"].grad[0, :width]  # position t predicts response token t
    assert torch.all(grad[tool[:width]] == 0)  # tool-result tokens: exactly zero
    assert all(grad[t].abs().sum() > 0 for t in torch.nonzero(exp.mask[i, :width]).flatten().tolist())


def _forward(parts, vision=None, padding_free: bool = False) -> PolicyForward:
    """The policy's log-prob pass at temperature 1, padded or packed, with or without a feature cache."""
    return dataclasses.replace(
        parts.forward, temperature=1.0, vision=vision, packing=Packing(padding_free=padding_free)
    )


def _gap(a: torch.Tensor, b: torch.Tensor, where: torch.Tensor) -> float:
    """Largest difference on ``where``; the log-prob of a tool turn's vision token is -inf (never
    sampled) on both sides and must be so on both."""
    a, b = a[where], b[where]
    assert torch.equal(torch.isinf(a), torch.isinf(b))
    finite = torch.isfinite(a)
    return float((a[finite] - b[finite]).abs().max())


def test_packed_episodes_equal_the_padded_forward(make_cfg):
    """``trainer.padding_free`` with episodes: each sequence's media (its prompt's, then its tool
    turns') and the vision tokens of its tool turns go into the packed row; log-probs and entropy of
    every real token equal the padded forward's, and a packed episode step trains."""
    trainer = Trainer(make_cfg(*TOOLS, "trainer.val_size=0"))
    script_first_turns(trainer)
    parts = trainer.parts
    exp = _rollouts(trainer)
    idx = list(range(len(exp)))
    assert any(exp.response_media[i] for i in idx) and not all(exp.response_media[i] for i in idx)
    with torch.no_grad():
        rows, mask, width = update.response_rows(exp, idx)
        padded_lp, padded_ent = _forward(parts).logprobs(rows)
        packed_lp, packed_ent = _forward(parts, padding_free=True).logprobs(rows)
    real = exp.real[idx, :width].bool()
    assert _gap(packed_lp, padded_lp, real) < 1e-5 and _gap(packed_ent, padded_ent, real) < 1e-5

    packed = Trainer(make_cfg(*TOOLS, "trainer.val_size=0", "trainer.padding_free=true"))
    script_first_turns(packed)
    m = packed.rl_step()
    assert m["tools/call_rate"] > 0 and m["actor/grad_norm"] > 0 and m["rollout/logprob_gap_max"] < 1e-4


def test_the_frozen_tower_feature_cache_serves_the_tool_turns_media(make_cfg):
    """``model.freeze_vision_tower`` with episodes: one tower call encodes the step's prompt and
    tool media; every forward (padded or packed) is served from it and equals re-encoding."""
    trainer = Trainer(make_cfg(*TOOLS, "trainer.val_size=0", "model.freeze_vision_tower=true"))
    script_first_turns(trainer)
    parts, cache = trainer.parts, trainer.parts.forward.vision
    exp = _rollouts(trainer)
    idx = list(range(len(exp)))
    assert any(exp.response_media[i] for i in idx)
    rows, _, width = update.response_rows(exp, idx)
    with torch.no_grad():
        encoded, _ = _forward(parts).logprobs(rows)
        cache.start(exp.batch, exp.response_media)
        try:
            served, _ = _forward(parts, vision=cache).logprobs(rows)
            packed, _ = _forward(parts, vision=cache, padding_free=True).logprobs(rows)
            encodes, hits = cache.encodes, cache.served
        finally:
            cache.stop()
    real = exp.real[idx, :width].bool()
    assert _gap(served, encoded, real) < 1e-5 and _gap(packed, encoded, real) < 1e-5
    assert encodes == 1 and hits == 2  # videos only: one encode, two forwards served

    m = trainer.rl_step()
    assert m["tools/call_rate"] > 0 and m["rollout/logprob_gap_max"] < 1e-4


def test_a_lora_episode_step_moves_only_the_adapter(make_cfg):
    """LoRA with episodes: the step trains the adapters on the policy's tokens (base weights kept),
    and the trainer's forward through the adapted model recomputes the engine's log-probs."""
    from easyvideor1.models.lora import adapter_parameters

    trainer = Trainer(make_cfg(*TOOLS, "trainer.val_size=0", "model.lora.rank=8", "model.lora.alpha=32"))
    script_first_turns(trainer)
    model = trainer.parts.model
    base = {k: v.clone() for k, v in model.state_dict().items() if "lora_" not in k}
    adapters = {n: p.detach().clone() for n, p in adapter_parameters(model).items()}
    m = trainer.rl_step()
    assert m["tools/call_rate"] > 0 and m["rollout/logprob_gap_max"] < 1e-4 and m["actor/grad_norm"] > 0
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in base.items())
    assert any(not torch.equal(p.detach(), adapters[n]) for n, p in adapter_parameters(model).items())


def test_an_unknown_tool_is_refused_at_start_up(make_cfg):
    with pytest.raises(ValueError, match="teleport"):
        Trainer(make_cfg(*TOOLS, "tools.names=[teleport]"))


def test_offline_episodes_are_replayed_with_real_tool_results_in_groups_and_warm_up(make_cfg, turns_file):
    cfg = make_cfg(
        *TOOLS,
        "trainer.val_size=0",
        f"data.train_files=[{turns_file}]",
        "rollout.max_new_tokens=160",  # an offline turn is cut to the response limit like any other
        "trainer.sft_warmup_steps=3",
        "trainer.sft_batch_size=4",
    )
    trainer = Trainer(cfg)
    parts = trainer.parts
    exp = _rollouts(trainer)
    offline = [i for i in range(len(exp)) if exp.offline[i]]
    assert offline and all(exp.response_media[i] for i in offline)  # the seek's frames ride along
    i = offline[0]
    tool = (exp.valid[i] == 1) & (exp.mask[i] == 0)
    text = parts.processor.tokenizer.decode(exp.ids[i][tool])
    assert "<tool_response>" in text and "2 frames from 0.00 s to" in text  # the tool's own result
    policy = parts.processor.tokenizer.decode(exp.ids[i][exp.mask[i].bool()])
    assert policy.startswith("<tool_call>") and policy.endswith("</answer><|im_end|>")
    assert exp.texts[i].startswith("<answer>")  # the final turn is what is scored
    assert trainer.sft_warmup()  # the warm-up trains on the replayed episodes' policy turns


def test_reward_tools_shaping_is_added_to_an_episode_overall(make_cfg):
    trainer = Trainer(
        make_cfg(
            *TOOLS, "trainer.val_size=0", "reward.tools.valid_call=0.5", "reward.tools.invalid_call=0.25"
        )
    )
    script_first_turns(trainer)
    exp = _rollouts(trainer)
    base = 0.9 * exp.scores["accuracy"] + 0.1 * exp.scores["format"]  # the task's own overall
    called = [i for i in range(len(exp)) if exp.response_media[i]]  # a valid seek (frames returned)
    assert called and all(float(exp.scores["overall"][i] - base[i]) == pytest.approx(0.5) for i in called)
    assert exp.metrics["reward/tool_shaping"] > 0


def test_tool_shaping_by_hand():
    from easyvideor1.rewards.config import ToolRewardConfig

    cfg = ToolRewardConfig(valid_call=0.3, invalid_call=0.1, max_calls=2, over_budget=0.05)
    # 4 calls: 1 invalid, 1 error, 2 valid -> +0.3 - 0.1 * 2 - 0.05 * (4 - 2)
    assert cfg.shaping({"calls": 4, "invalid_calls": 1, "errors": 1}) == pytest.approx(0.3 - 0.2 - 0.1)
    assert cfg.shaping({"calls": 1, "invalid_calls": 1, "errors": 0}) == pytest.approx(-0.1)  # no valid call
    assert ToolRewardConfig().shaping({"calls": 3, "invalid_calls": 2, "errors": 1}) == 0.0  # off by default
    with pytest.raises(ValueError, match="reward.tools.invalid_call must be >= 0"):
        ToolRewardConfig(invalid_call=-1.0)


@pytest.mark.slow  # ~40 s: three short runs
def test_a_run_with_episodes_resumes_exactly(make_cfg, tmp_path):
    """4 steps straight, or 2 steps, a checkpoint and 2 more in a new trainer: the same steps 3-4
    (rollouts with tool calls included)."""
    import json

    def run(out, steps, save):
        cfg = make_cfg(
            *TOOLS,
            "trainer.val_size=0",
            f"trainer.output_dir={out}",
            f"trainer.max_steps={steps}",
            f"trainer.save_every={save}",
        )
        trainer = Trainer(cfg)
        script_first_turns(trainer)
        trainer.train()

    run(tmp_path / "a", 4, 0)
    run(tmp_path / "b", 2, 2)
    run(tmp_path / "b", 4, 0)

    def steps(out):
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        return {m["step"]: m for m in rows if "actor/pg_loss" in m}

    a, b = steps(tmp_path / "a"), steps(tmp_path / "b")
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    for step in (3, 4):
        for key in (
            "reward/overall",
            "actor/pg_loss",
            "actor/grad_norm",
            "tools/calls_per_episode",
            "response/length",
        ):
            assert a[step][key] == pytest.approx(b[step][key], rel=1e-5, abs=1e-7), (step, key)
