"""The RL loop: hybrid groups, preflight, checkpoints and exact resume."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from transformers import AutoModelForImageTextToText

from easyvideor1.data.dataset import encode_prompts
from easyvideor1.media.cache import CacheError
from easyvideor1.models.logprobs import Packing
from easyvideor1.rewards import UnknownTaskError
from easyvideor1.trainer.loop import Trainer
from easyvideor1.trainer.rounds import collect_round


def _metrics(path):
    return [json.loads(line) for line in open(path)]


def _collect(t: Trainer, batch, samples):
    """One round's scored rollouts of ``samples`` with the trainer's engine, sampling and reward
    settings."""
    return collect_round(t.context, samples, batch)


def test_hybrid_groups_generate_only_n_minus_k(make_cfg):
    cfg = make_cfg("rollout.hybrid=always", "rollout.offline_k=1")
    t = Trainer(cfg)
    samples = [t.data.train_set[i] for i in range(3)]
    batch = encode_prompts(t.parts.processor, samples, t.cfg.data, t.data.train_set.loader)
    calls = []
    original = t.parts.engine.generate
    t.parts.engine.generate = lambda b, repeats, s: calls.append(list(repeats)) or original(b, repeats, s)
    exp = _collect(t, batch, samples)
    assert calls == [[3, 3, 3]], "only n - k responses are generated"
    assert len(exp) == 12 and int(exp.offline.sum()) == 3
    for i in exp.offline.nonzero().flatten().tolist():
        n = int(exp.mask[i].sum())
        assert exp.ids[i, n - 1] == t.parts.engine.eos_ids[0], (
            "offline responses end with the end-of-turn token"
        )
        assert exp.scores["accuracy"][i] == 1.0 and exp.texts[i].startswith("<answer>")
    # groups stay together, in prompt order
    assert exp.prompt_of == [0] * 4 + [1] * 4 + [2] * 4


def test_offline_responses_are_truncated_and_flagged(make_cfg):
    cfg = make_cfg("rollout.hybrid=always", "rollout.max_new_tokens=2")
    t = Trainer(cfg)
    samples = [t.data.train_set[0]]
    batch = encode_prompts(t.parts.processor, samples, t.cfg.data, t.data.train_set.loader)
    exp = _collect(t, batch, samples)
    off = exp.offline.nonzero().flatten().tolist()
    assert off and all(bool(exp.truncated[i]) and int(exp.mask[i].sum()) == 2 for i in off)
    # scored on the kept tokens, not on the full offline text
    assert all(exp.texts[i] != samples[0].record.offline_output for i in off)


def test_below_threshold_mode_completes_confident_groups_online(make_cfg):
    cfg = make_cfg("rollout.hybrid=below_threshold", "rollout.hybrid_threshold=0.0")  # never below 0
    t = Trainer(cfg)
    samples = [t.data.train_set[i] for i in range(2)]
    batch = encode_prompts(t.parts.processor, samples, t.cfg.data, t.data.train_set.loader)
    exp = _collect(t, batch, samples)
    assert len(exp) == 8 and not exp.offline.any()
    cfg = make_cfg("rollout.hybrid=below_threshold", "rollout.hybrid_threshold=1.0")  # below unless all right
    t = Trainer(cfg)
    exp = _collect(t, batch, samples)
    assert len(exp) == 8 and int(exp.offline.sum()) == 2


def test_preflight_drops_overlong_prompts_and_checks_the_cache(make_cfg, demo_assets):
    t = Trainer(make_cfg("data.max_prompt_length=10000"))
    assert len(t.data.train_idx) == 24
    with pytest.raises(ValueError, match="no prompt fits"):
        Trainer(make_cfg("data.max_prompt_length=5"))
    empty = demo_assets["dir"] / "empty_cache"
    with pytest.raises(CacheError, match="does not exist"):
        Trainer(make_cfg(f"data.cache_dir={empty}", "data.cache_mode=cache_only"))
    empty.mkdir(exist_ok=True)
    # every record lacks its entry: each is skipped, and with none left the run stops saying why
    with pytest.raises(ValueError, match="no record can be used.*no cache entry.*cache_only"):
        Trainer(make_cfg(f"data.cache_dir={empty}", "data.cache_mode=cache_only"))


def test_fast_preflight_drops_overlong_prompts_at_their_step(make_cfg, demo_assets, tmp_path):
    rows = [json.loads(line) for line in open(demo_assets["train"])][:8]
    for r in rows:
        r["videos"] = [str(demo_assets["dir"] / "data" / r["videos"][0])]
    rows[1]["problem"] = "Look closely at every frame of the video. " * 60  # far over the limit
    data = tmp_path / "mixed.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    common = (f"data.train_files=[{data}]", "data.max_prompt_length=300", "trainer.prompts_per_step=8")
    full = Trainer(make_cfg(*common, "trainer.mini_batch_prompts=8"))
    assert len(full.data.train_idx) == 7  # dropped at start-up
    fast = Trainer(make_cfg(*common, "trainer.mini_batch_prompts=8", "data.preflight=fast"))
    assert len(fast.data.train_idx) == 8  # nothing encoded up front
    m = fast.rl_step()
    assert m["data/dropped_overlong"] == 1.0 and len(fast.history) == 0
    assert m["actor/grad_norm"] >= 0


def test_unknown_task_fails_at_start_up(make_cfg, demo_assets, tmp_path):
    bad = tmp_path / "bad.jsonl"
    line = json.loads(open(demo_assets["train"]).readline())
    line["problem_type"] = "telepathy"
    line["videos"] = [str(demo_assets["dir"] / "data" / line["videos"][0])]
    bad.write_text(json.dumps(line) + "\n")
    with pytest.raises(UnknownTaskError, match="telepathy"):
        Trainer(make_cfg(f"data.train_files=[{bad}]"))


def test_kl_reference_is_the_warmed_up_policy(make_cfg):
    t = Trainer(make_cfg("algorithm.kl.type=k3", "trainer.sft_warmup_steps=3", "trainer.sft_batch_size=4"))
    start = {k: v.clone() for k, v in t.model.state_dict().items()}
    assert t.sft_warmup()
    now, ref = t.model.state_dict(), t.ref_model.state_dict()
    assert any(not torch.equal(start[k], now[k]) for k in now)  # the warm-up moved the policy
    assert all(torch.equal(now[k], ref[k]) for k in now)  # and the reference moved with it
    assert t.reference_moved


@pytest.mark.parametrize(
    "extra",
    [
        (),
        # the KL reference is the warmed-up policy, saved with the checkpoint and restored on resume,
        # and so is the adaptive controller's coefficient
        (
            "algorithm.kl.type=k3",
            "algorithm.kl.controller=adaptive",
            "trainer.sft_warmup_steps=3",
            "trainer.sft_batch_size=4",
        ),
    ],
    ids=["plain", "kl_after_warmup"],
)
def test_resume_reproduces_the_uninterrupted_run(make_cfg, tmp_path, extra):
    straight = make_cfg(
        "trainer.max_steps=4", f"trainer.output_dir={tmp_path / 'a'}", "rollout.hybrid=always", *extra
    )
    Trainer(straight).train()
    first = make_cfg(
        "trainer.max_steps=2",
        "trainer.save_every=2",
        f"trainer.output_dir={tmp_path / 'b'}",
        "rollout.hybrid=always",
        *extra,
    )
    Trainer(first).train()
    second = make_cfg(
        "trainer.max_steps=4", f"trainer.output_dir={tmp_path / 'b'}", "rollout.hybrid=always", *extra
    )
    resumed = Trainer(second)
    resumed.train()
    a = {m["step"]: m for m in _metrics(tmp_path / "a" / "metrics.jsonl") if "actor/pg_loss" in m}
    b = {m["step"]: m for m in _metrics(tmp_path / "b" / "metrics.jsonl") if "actor/pg_loss" in m}
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    keys = ("reward/overall", "actor/pg_loss", "response/length", "actor/grad_norm")
    if extra:
        keys += ("actor/kl_loss", "actor/kl_coef")
        assert (tmp_path / "b" / "checkpoints" / "step_2" / "reference").is_dir()
    for step in (3, 4):
        for key in keys:
            assert a[step][key] == pytest.approx(b[step][key], rel=1e-5, abs=1e-7), (step, key)
    # the checkpoint is a plain Hugging Face model directory
    ckpt = tmp_path / "b" / "checkpoints" / "step_4"
    model = AutoModelForImageTextToText.from_pretrained(ckpt)
    assert isinstance(model, torch.nn.Module)
    assert not list((tmp_path / "b" / "checkpoints").glob("*.pt"))


@pytest.mark.parametrize(
    "estimator,loss",
    [
        ("grpo", "ppo"),
        ("dr_grpo", "gspo"),
        ("rloo", "cispo"),
        ("reinforce_plus_plus", "gspo_token"),
        ("remax", "ppo"),
        ("gdpo", "ppo"),
        ("reinforce_plus_plus_baseline", "ppo"),
        ("grpo_passk", "gspo"),
        ("opo", "sapo"),
        ("gpg", "geo_mean"),
        ("grpo", "clip_cov"),
        ("rloo", "kl_cov"),
        ("grpo", "dppo"),
    ],
)
def test_every_estimator_and_loss_runs_a_step(make_cfg, estimator, loss):
    raw_keys = estimator in ("remax", "gdpo")  # they work on raw reward keys / a greedy baseline
    extra = [] if raw_keys else ["algorithm.overlong.enable=true", "algorithm.overlong.buffer=2"]
    if loss in ("sapo", "geo_mean"):  # per-sequence losses
        extra.append("algorithm.loss_agg_mode=seq-mean-token-mean")
    t = Trainer(
        make_cfg(
            f"algorithm.adv_estimator={estimator.upper()}",
            f"algorithm.policy_loss={loss}",
            "rollout.hybrid=always",
            "algorithm.online_filtering.enable=true",
            "algorithm.kl.type=k3",
            "algorithm.kl.coef=0.01",
            "algorithm.kl.controller=adaptive",
            *extra,
        )
    )
    m = t.rl_step()
    assert all(v == v for v in m.values()), "no NaN metric"
    assert m["actor/skipped_steps"] == 0 and m["actor/grad_norm"] > 0
    assert "filter/kept_groups" in m and "actor/kl_loss" in m
    assert m["actor/kl_coef"] != 0.01, "the adaptive controller moved the coefficient"
    assert raw_keys or "reward/overlong_penalty" in m
    if raw_keys:
        with pytest.raises(ValueError, match="overlong"):
            Trainer(make_cfg(f"algorithm.adv_estimator={estimator}", "algorithm.overlong.enable=true"))


def test_joint_image_video_text_batch_trains(make_cfg, demo_assets, tmp_path):
    from PIL import Image

    video_rows = [json.loads(line) for line in open(demo_assets["train"])][:2]
    for r in video_rows:
        r["videos"] = [str(demo_assets["dir"] / "data" / r["videos"][0])]
    rows = list(video_rows)
    for i, colour in enumerate(["red", "blue"]):
        path = tmp_path / f"{colour}.png"
        Image.new("RGB", (40, 30), colour).save(path)
        letter = "A" if colour == "red" else "C"
        rows.append(
            {
                "problem_id": f"img{i}",
                "problem": "What colour is the image?",
                "images": [str(path)],
                "options": ["A. red", "B. green", "C. blue", "D. yellow"],
                "problem_type": "multiple choice",
                "answer": letter,
                "offline_output": f"<answer>{letter}</answer>",
            }
        )
    rows += [
        {
            "problem_id": f"txt{i}",
            "problem": f"What is {i} + 2?",
            "problem_type": "numerical",
            "answer": str(i + 2),
            "offline_output": f"<answer>{i + 2}</answer>",
        }
        for i in range(2)
    ]
    data = tmp_path / "mixed.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    t = Trainer(
        make_cfg(
            f"data.train_files=[{data}]",
            "data.val_files=[]",
            "trainer.prompts_per_step=6",
            "trainer.mini_batch_prompts=3",
            "rollout.hybrid=always",
            "data.image_max_pixels=8192",
        )
    )
    with_grad: set[str] = set()  # what each optimizer step finds a gradient for
    t.optimizer.register_step_pre_hook(
        lambda *_: with_grad.update(n for n, p in t.model.named_parameters() if p.grad is not None)
    )
    m = t.rl_step()
    assert m["actor/skipped_steps"] == 0 and m["actor/grad_norm"] > 0
    assert "reward/multiple_choice/accuracy" in m and "reward/numerical/accuracy" in m
    missing = [n for n, p in t.model.named_parameters() if p.requires_grad and n not in with_grad]
    assert not missing, "the vision tower is part of every backward, whatever the batch holds"
    assert all(p.grad is None for p in t.model.parameters()), "the step frees the gradients' memory"


def test_dynamic_sampling_draws_more_prompts_until_groups_carry_signal(make_cfg):
    t = Trainer(
        make_cfg(
            "rollout.hybrid=always",
            "algorithm.online_filtering.enable=true",
            "algorithm.online_filtering.max_tries=3",
        )
    )
    # an untrained model fails every online response and the offline one is right: every group has
    # signal, so one round suffices
    m = t.rl_step()
    assert m["filter/rounds"] == 1 and m["filter/kept_groups"] == 4
    # without offline responses almost every reward is 0: rounds continue until the retry budget is
    # spent (or, by luck, enough groups got a right answer)
    t = Trainer(
        make_cfg(
            "rollout.hybrid=off",
            "algorithm.online_filtering.enable=true",
            "algorithm.online_filtering.max_tries=3",
            "algorithm.online_filtering.key=accuracy",
        )
    )
    m = t.rl_step()
    rounds, kept, dropped = m["filter/rounds"], m["filter/kept_groups"], m["filter/dropped_groups"]
    assert rounds == 3 or kept == 4
    assert kept < 4 and rounds == 3, "an untrained model rarely answers right"
    assert dropped == 4 * rounds - kept


def test_merge_groups_keeps_whole_groups_in_order(make_cfg):
    from easyvideor1.trainer.rounds import merge_groups

    t = Trainer(make_cfg("rollout.hybrid=always"))
    parts = []
    for _ in range(2):
        samples, batch = t.draws.next()
        exp = _collect(t, batch, samples)
        parts.append((exp, samples, [1, 3]))
    kept = [s[p] for _, s, keep in parts for p in keep]
    merged = merge_groups(parts, encode_prompts(t.parts.processor, kept, t.cfg.data, t.data.train_set.loader))
    assert merged.prompt_of == [0] * 4 + [1] * 4 + [2] * 4 + [3] * 4
    first = [i for i, p in enumerate(parts[0][0].prompt_of) if p == 1]
    assert merged.texts[:4] == [parts[0][0].texts[i] for i in first]
    # the merged experience goes through a full update
    from easyvideor1.trainer.advantages import step_advantages
    from easyvideor1.trainer.update import experience_logprobs, policy_update

    old = dataclasses.replace(t.parts.forward, temperature=1.0, packing=Packing(micro_batch_size=5))
    merged.old_logp, _ = experience_logprobs(old, merged)
    alg = t.cfg.algorithm
    merged.advantages = step_advantages(alg, merged, merged.scores["overall"], kept, None, t.parts.dist)
    m = policy_update(t.parts.forward, t.optimizer, None, merged, [list(range(16))], t.settings.update)
    assert m["actor/skipped_steps"] == 0 and m["actor/ppo_kl"] == pytest.approx(0.0, abs=1e-5)


def test_offline_policy_shaping_strengthens_unlikely_offline_tokens():
    from easyvideor1.trainer.update import _shape_offline

    logp = torch.log(torch.tensor([[0.01, 0.9], [0.01, 0.9]])).requires_grad_(True)
    adv = torch.ones(2, 2)
    mask = torch.ones(2, 2)
    plain = -adv * logp.exp()  # ratio-1 surrogate: gradient proportional to p
    shaped = _shape_offline(plain, logp, adv, mask, torch.tensor([True, False]), gamma=0.1)
    shaped.sum().backward()
    g = logp.grad
    # offline row: d/dlogp of -p/(p+0.1) = -0.1 p/(p+0.1)^2; online row keeps -p
    assert g[0, 0] == pytest.approx(-0.1 * 0.01 / 0.11**2, rel=1e-4)
    assert g[0, 1] == pytest.approx(-0.1 * 0.9 / 1.0**2, rel=1e-4)
    assert g[1].tolist() == pytest.approx([-0.01, -0.9], rel=1e-4)
    assert abs(g[0, 0] / g[0, 1]) > abs(g[1, 0] / g[1, 1]), "relatively more push on the unlikely token"


def test_a_step_with_offline_shaping(make_cfg):
    m = Trainer(make_cfg("rollout.hybrid=always", "rollout.offline_shaping=0.1")).rl_step()
    assert m["actor/skipped_steps"] == 0 and m["actor/grad_norm"] > 0


@pytest.mark.parametrize("family", ["qwen3vl", "qwen2_5vl", "qwen3_5"])
def test_checkpoint_weights_load_back_exactly(tmp_path, family):
    from easyvideor1.models.tiny import make_tiny_model
    from easyvideor1.trainer.checkpoint import load_model_weights

    src = make_tiny_model(str(tmp_path / "m"), family)
    trained = AutoModelForImageTextToText.from_pretrained(src)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.5)
    trained.save_pretrained(tmp_path / "ckpt")  # Qwen2.5-VL stores other key names than it uses
    fresh = AutoModelForImageTextToText.from_pretrained(src)
    load_model_weights(fresh, tmp_path / "ckpt")
    for (name, a), (_, b) in zip(trained.state_dict().items(), fresh.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_record_fields_named_like_score_arguments_do_not_collide(make_cfg):
    from easyvideor1.data.records import parse_record
    from easyvideor1.trainer.scoring import score

    t = Trainer(make_cfg())
    sample = t.data.train_set[0]
    sample.record = parse_record({**sample.record.to_dict(), "response": "a field", "config": 3}, "f[0]")
    scores, tasks, errors = score(["<answer>A</answer>"], [sample], [0], [4], t.cfg.reward)
    assert errors == 0 and tasks == ["multiple_choice"]
