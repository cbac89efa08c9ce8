"""The distillation teacher (``trainer/teacher.py``): its log-probs equal a direct forward of the
teacher on the same tokens, a self-teacher sees the answer the student does not, and a teacher
that cannot serve is refused before its weights load."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from easyvideor1.data.dataset import encode_prompts
from easyvideor1.data.privileged import privileged_context
from easyvideor1.errors import ConfigError
from easyvideor1.models.inputs import append_responses, gather_prompts
from easyvideor1.models.tiny import make_tiny_model
from easyvideor1.trainer import step as stages
from easyvideor1.trainer.loop import Trainer


@pytest.fixture(scope="module")
def teacher_dir(demo_assets):
    """Another tiny model of the policy's family and tokenizer (other weights)."""
    return make_tiny_model(str(demo_assets["dir"] / "teacher"), "qwen3vl", seed=7)


def captured_step(trainer, monkeypatch, direct):
    """Run one step; ``direct(step)`` runs when the advantages are made (before the update)."""
    seen = {}
    own = stages.advantages

    def advantages(ctx, step):
        seen["step"], seen["direct"] = step, direct(step)
        return own(ctx, step)

    monkeypatch.setattr(stages, "advantages", advantages)
    metrics = trainer.rl_step()
    return seen["step"], seen["direct"], metrics


def padded_logprobs(model, batch, exp, banned, temperature, top_k=0):
    """Each sequence alone, padded, re-encoding its media: the plainest forward there is (with
    ``top_k``, also the model's top-k ids and log-probs at each position)."""
    out, ids, top = torch.zeros(exp.ids.shape), torch.zeros((*exp.ids.shape, top_k), dtype=torch.long), None
    top = torch.zeros((*exp.ids.shape, top_k))
    with torch.no_grad():
        for i in range(len(exp)):
            inputs = append_responses(
                gather_prompts(batch, [exp.prompt_of[i]]), exp.ids[i : i + 1], exp.real[i : i + 1]
            )
            width = exp.ids.shape[1]
            logits = model(**inputs, use_cache=False).logits[0, -width - 1 : -1].float() / temperature
            logits[:, banned] = float("-inf")
            logp = torch.log_softmax(logits, -1)
            out[i] = logp.gather(-1, exp.ids[i][:, None])[:, 0]
            if top_k:
                top[i], ids[i] = logp.topk(top_k, -1)
    mask = exp.mask.bool()
    return out * mask, ids * mask[..., None], top * mask[..., None]


def test_a_checkpoint_teachers_logprobs_and_top_k_equal_a_direct_forward_of_the_teacher(
    make_cfg, teacher_dir, monkeypatch
):
    """GKD from another checkpoint, through the trainer's pass (packing, shared prefixes, its own
    micro-batches); the check loads the teacher on its own and scores every sequence alone. The
    update then adds the top-k KL term."""
    from transformers import AutoModelForImageTextToText

    cfg = make_cfg(
        "algorithm.distill.objective=gkd",
        f"algorithm.distill.teacher={teacher_dir}",
        "algorithm.distill.options.top_k=8",
        "algorithm.distill.micro_batch_size=5",
        "trainer.padding_free=true",
        "trainer.val_size=0",
    )
    trainer = Trainer(cfg)
    teacher = AutoModelForImageTextToText.from_pretrained(teacher_dir, dtype=torch.float32).eval()
    banned, temperature = trainer.parts.engine.banned, cfg.rollout.temperature
    step, (logp, ids, top), metrics = captured_step(
        trainer,
        monkeypatch,
        lambda s: padded_logprobs(teacher, s.experience.batch, s.experience, banned, temperature, top_k=8),
    )
    exp, mask = step.experience, step.experience.mask.bool()
    torch.testing.assert_close(exp.teacher.logp * mask, logp, atol=2e-5, rtol=0)
    torch.testing.assert_close(exp.teacher.top_logp * mask[..., None], top, atol=2e-5, rtol=0)
    assert torch.equal(exp.teacher.top_ids * mask[..., None], ids)
    assert not torch.allclose(exp.teacher.logp * mask, exp.old_logp * mask, atol=1e-3)  # another model
    assert metrics["actor/distill_loss"] > 0 and metrics["distill/kl_k3"] > 0
    trainer.close()


def test_a_self_teacher_scores_the_students_tokens_after_the_answer(make_cfg, monkeypatch):
    """RLSD with the policy as its own teacher: the teacher's prompt is the student's plus the
    record's answer (the student's never holds it); its log-probs equal the policy's direct forward
    over that prompt, and differ from the student's own."""
    cfg = make_cfg("algorithm.distill.objective=rlsd", "algorithm.distill.teacher=self", "trainer.val_size=0")
    trainer = Trainer(cfg)
    parts = trainer.parts

    def direct(step):
        view = privileged_context("answer").samples(step.samples)
        batch = encode_prompts(parts.processor, view, trainer.cfg.data, trainer.data.train_set.loader)
        assert all(s.record.answer in t for s, t in zip(step.samples, batch.texts, strict=True))
        assert not any("correct final answer" in t for t in step.batch.texts)
        return padded_logprobs(
            parts.model, batch, step.experience, parts.engine.banned, cfg.rollout.temperature
        )[0]

    step, direct_logp, metrics = captured_step(trainer, monkeypatch, direct)
    exp = step.experience
    torch.testing.assert_close(exp.teacher.logp * exp.mask, direct_logp, atol=2e-5, rtol=0)
    assert not torch.allclose(exp.teacher.logp * exp.mask, exp.old_logp * exp.mask, atol=1e-4)
    assert 0 < metrics["distill/reweighted_share"] <= 1 and metrics["distill/lambda"] == 1.0
    trainer.close()


def test_a_teacher_with_other_token_ids_is_refused_before_it_loads(make_cfg, teacher_dir, tmp_path):
    other = tmp_path / "other_ids"
    shutil.copytree(teacher_dir, other)
    tokenizer = json.loads((other / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    vocab["a"], vocab["b"] = vocab["b"], vocab["a"]
    (other / "tokenizer.json").write_text(json.dumps(tokenizer))
    cfg = make_cfg("algorithm.distill.objective=opd", f"algorithm.distill.teacher={other}")
    with pytest.raises(
        ConfigError, match=r"algorithm.distill.teacher .*differs from the policy's on 2 token\(s\)"
    ):
        Trainer(cfg)


def test_a_teacher_larger_than_its_declared_memory_is_refused(make_cfg, teacher_dir):
    cfg = make_cfg(
        "algorithm.distill.objective=opd",
        f"algorithm.distill.teacher={teacher_dir}",
        "algorithm.distill.memory_gib=0.0001",
    )
    with pytest.raises(
        ConfigError, match=r"needs 0\.\d+ GiB per rank in float32 and algorithm.distill.memory_gib has"
    ):
        Trainer(cfg)


def test_a_teacher_of_another_family_reads_the_same_frames_on_its_own_grid(
    make_cfg, demo_assets, monkeypatch
):
    """A Qwen2.5-VL teacher (patch 14: a 28-pixel grid) of a Qwen3-VL student (32): same token ids,
    so it is taken; its prompts are rendered by its own chat template and processor over the
    student's frames resized to its grid, and its log-probs equal its plain forward over them."""
    from transformers import AutoModelForImageTextToText

    other = make_tiny_model(str(demo_assets["dir"] / "teacher_q25"), "qwen2_5_vl")
    cfg = make_cfg(
        "algorithm.distill.objective=opd", f"algorithm.distill.teacher={other}", "trainer.val_size=0"
    )
    trainer = Trainer(cfg)
    own = trainer.parts.teacher.own
    assert own is not None and own.factor == 28 and own.data_cfg.model_family == "qwen2_5_vl"
    teacher = AutoModelForImageTextToText.from_pretrained(other, dtype=torch.float32).eval()
    banned = trainer.parts.engine.banned

    def direct(step):
        batch = own.encode(step.samples, trainer.cfg.data, trainer.data.train_set.loader)
        grids = batch.inputs["video_grid_thw"]
        assert (grids[:, 1:] % 2 == 0).all()  # whole 2 x 2 merges of 14-pixel patches: a 28 grid
        frames = [v.frames for s in step.samples for v in (s.loaded or ([], []))[0]]
        assert frames and all(f.shape[1] % 32 == 0 for f in frames)  # the student's frames are untouched
        return padded_logprobs(teacher, batch, step.experience, banned, cfg.rollout.temperature)[0], batch

    step, (logp, batch), metrics = captured_step(trainer, monkeypatch, direct)
    exp = step.experience
    torch.testing.assert_close(exp.teacher.logp * exp.mask, logp, atol=2e-5, rtol=0)
    assert batch.inputs["pixel_values_videos"].shape != step.batch.inputs["pixel_values_videos"].shape
    assert metrics["distill/kl_k3"] > 0
    trainer.close()


@pytest.mark.slow
def test_a_two_rank_distillation_step_equals_the_single_process_step(demo_assets, teacher_dir, tmp_path):
    """GKD from a checkpoint teacher sharded by FSDP2 with the policy (its top-k, and the update's
    KL term), and a self-teacher's privileged view, on 2 torchrun ranks (uneven shares, so filler
    forwards run) and in one process: the same teacher log-probs and the same weights after the
    update."""
    from safetensors import safe_open

    from tests.conftest import write_modality_records
    from tests.trainer.conftest import run_worker

    (tmp_path / "kinds").mkdir()
    records = write_modality_records(tmp_path / "kinds", 4, 0, ("A. red", "B. blue"))
    args = [demo_assets["model"], teacher_dir, records]
    single, double = tmp_path / "one.safetensors", tmp_path / "two.safetensors"
    run_worker("distill_worker.py", *args, str(single))
    run_worker("distill_worker.py", *args, str(double), ranks=2)
    with safe_open(str(single), "pt") as a, safe_open(str(double), "pt") as b:
        assert set(a.keys()) == set(b.keys())
        worst = max(float((a.get_tensor(k) - b.get_tensor(k)).abs().max()) for k in a.keys())
        moved = max(float(a.get_tensor(k).abs().max()) for k in a.keys())
        one, two = json.loads(a.metadata()["logps"]), json.loads(b.metadata()["logps"])
        distill_loss = json.loads(b.metadata()["metrics"])["actor/distill_loss"]
    assert worst < 1e-6 and moved > 0
    assert distill_loss > 0
    for kind in ("teacher", "self"):
        torch.testing.assert_close(torch.tensor(two[kind]), torch.tensor(one[kind]), atol=1e-5, rtol=0)
    assert torch.tensor(one["teacher"]).abs().sum() > 0
    assert not torch.allclose(torch.tensor(one["teacher"]), torch.tensor(one["self"]), atol=1e-3)


def test_a_lora_policys_reference_self_teacher_is_the_adapter_free_base(make_cfg, demo_assets, monkeypatch):
    """``self_teacher: reference`` with LoRA: no copy is made, and the teacher's log-probs over its
    privileged view equal those of the base checkpoint loaded on its own (adapters made non-zero
    first, so the adapted policy differs)."""
    from transformers import AutoModelForImageTextToText

    from easyvideor1.models.lora import adapter_parameters

    cfg = make_cfg(
        "model.lora.rank=4",
        "model.lora.alpha=32",
        "algorithm.distill.objective=rlsd",
        "algorithm.distill.teacher=self",
        "algorithm.distill.self_teacher=reference",
        "trainer.val_size=0",
    )
    trainer = Trainer(cfg)
    parts = trainer.parts
    assert parts.ref_model is None  # the base is the policy with its adapter disabled
    with torch.no_grad():
        for p in adapter_parameters(parts.model).values():
            p.normal_(0, 0.05)
    base = AutoModelForImageTextToText.from_pretrained(demo_assets["model"], dtype=torch.float32).eval()

    def direct(step):
        view = privileged_context("answer").samples(step.samples)
        batch = encode_prompts(parts.processor, view, trainer.cfg.data, trainer.data.train_set.loader)
        banned = parts.engine.banned
        return padded_logprobs(base, batch, step.experience, banned, cfg.rollout.temperature)[0]

    step, base_logp, _ = captured_step(trainer, monkeypatch, direct)
    exp = step.experience
    torch.testing.assert_close(exp.teacher.logp * exp.mask, base_logp, atol=2e-5, rtol=0)
    trainer.close()


def test_an_episode_steps_teacher_scores_the_policys_tokens_only(make_cfg, monkeypatch):
    """OPD from the policy shown the answer in a step of episodes: the teacher's log-probs (and
    so the distillation term) are 0 on the tool turns' tokens, real on the policy's."""
    from tests.trainer.test_episodes import TOOLS, script_first_turns

    cfg = make_cfg(
        *TOOLS,
        "algorithm.distill.objective=opd",
        "algorithm.distill.teacher=self",
        "trainer.val_size=0",
    )
    trainer = Trainer(cfg)
    script_first_turns(trainer)
    step, _, metrics = captured_step(trainer, monkeypatch, lambda s: None)
    exp = step.experience
    tool_tokens = exp.real.bool() & ~exp.mask.bool()
    assert tool_tokens.any()  # the scripted seek calls' results are in the responses
    assert float(exp.teacher.logp[tool_tokens].abs().sum()) == 0.0
    assert (exp.teacher.logp[exp.mask.bool()] < 0).all()
    assert float(exp.advantages[tool_tokens].abs().sum()) == 0.0 and "distill/advantage_term" in metrics
    trainer.close()


def test_one_step_off_rollouts_distill_from_the_policy_of_their_update(make_cfg):
    """``rollout.mode=one_step_off``: the rollouts were sampled a step before, the teacher (the
    policy shown the answer) scores them when they are trained on; the run completes."""
    cfg = make_cfg(
        "rollout.mode=one_step_off",
        "algorithm.distill.objective=rlsd",
        "algorithm.distill.teacher=self",
        "trainer.val_size=0",
    )
    trainer = Trainer(cfg)
    trainer.train()
    rows = [json.loads(line) for line in open(f"{cfg.trainer.output_dir}/metrics.jsonl")]
    steps = [r for r in rows if "distill/reweighted_share" in r]
    assert trainer.step == 2 and len(steps) == 2
    assert all(0 <= r["distill/reweighted_share"] <= 1 and r["distill/kl_k3"] > 0 for r in steps)
    trainer.close()


def test_a_synced_self_teacher_is_the_policy_of_the_last_sync_and_resumes(make_cfg, tmp_path):
    """``sync_steps: 1`` with the reference as teacher: after each step the reference holds the
    policy's weights (the RLSD authors' frozen, re-synced teacher); the moved reference is saved
    and a resumed run starts from it."""
    overrides = (
        "algorithm.distill.objective=rlsd",
        "algorithm.distill.teacher=self",
        "algorithm.distill.self_teacher=reference",
        "algorithm.distill.sync_steps=1",
        "trainer.val_size=0",
        "trainer.max_steps=1",
        f"trainer.output_dir={tmp_path / 'run'}",
    )
    trainer = Trainer(make_cfg(*overrides))
    start = {k: v.clone() for k, v in trainer.parts.ref_model.state_dict().items()}
    trainer.train()
    policy, ref = trainer.parts.model.state_dict(), trainer.parts.ref_model.state_dict()
    assert trainer.reference_moved and all(torch.equal(policy[k], ref[k]) for k in policy)
    assert any(not torch.equal(start[k], ref[k]) for k in ref)  # it moved
    trainer.close()
    resumed = Trainer(make_cfg(*overrides, "trainer.max_steps=2"))
    assert resumed.restore() and resumed.reference_moved
    back = resumed.parts.ref_model.state_dict()
    assert all(torch.equal(back[k], ref[k]) for k in ref)
    resumed.close()
