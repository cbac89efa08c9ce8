"""``easyvideor1 plan`` on the shipped GPU recipes: every phase's verdict, the terms a reader can
check by hand, a failing run named with the settings that fix it, and the one-line refusals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from easyvideor1.cli import main
from easyvideor1.config import RunConfig, load_config
from easyvideor1.errors import ConfigError
from easyvideor1.plan import Hardware, plan
from easyvideor1.plan.architecture import architecture
from easyvideor1.plan.memory import GIB
from easyvideor1.plan.verdict import _with

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
RECIPE_8B = str(CONFIGS / "qwen3vl_8b_video_rl.yaml")
PHASES = ["generate", "engine asleep", "logprobs", "update", "wake and push"]


@pytest.fixture(scope="module")
def arch_8b():
    return architecture("Qwen/Qwen3-VL-8B-Instruct")


def _plan_json(capsys, *argv: str) -> dict:
    assert main(["plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "recipe, gpus",
    [("qwen3vl_8b_video_rl.yaml", 8), ("qwen3vl_2b_1gpu.yaml", 1), ("qwen3vl_8b_256f_sp.yaml", 8)],
)
def test_each_shipped_gpu_recipe_fits_80_gib_gpus_in_every_phase(capsys, recipe, gpus):
    d = _plan_json(capsys, f"config={CONFIGS / recipe}", "--gpus", str(gpus), "--gpu-memory", "80")
    assert d["fits"] is True and d["gpus"] == gpus
    assert [p["name"] for p in d["phases"]] == PHASES
    for p in d["phases"]:
        assert p["fits"] and 0 < p["peak_gib"] < 80, p
        assert abs(sum(p["parts_gib"].values()) - p["peak_gib"]) < 0.01
    assert d["kv_cache"]["groups_at_once"] >= 1
    assert all(c["seconds"] > 0 for c in d["estimate"]["phases"])


def test_the_terms_a_reader_can_check_by_hand(arch_8b):
    cfg = load_config(RunConfig, RECIPE_8B)
    p = plan(cfg, Hardware(gpus=8, memory_gib=80.0), arch_8b)
    total = 8_767_123_696
    generate = p.phase("generate").parts
    # fp32 masters and AdamW's two fp32 moments, sharded over 8 ranks; a bf16 engine copy
    assert generate["weights"] == pytest.approx(total * 4 / 8)
    assert generate["optimizer"] == pytest.approx(2 * total * 4 / 8)
    assert generate["engine weights"] == pytest.approx(total * 2)
    engine = sum(v for k, v in generate.items() if k.startswith("engine") or k == "kv cache")
    assert engine == pytest.approx(0.5 * 80 * GIB)  # rollout.vllm.gpu_memory_utilization
    # K and V of 36 layers x 8 heads x 128 in bf16 per token
    assert p.kv["bytes_per_token"] == 2 * 36 * 8 * 128 * 2
    assert p.kv["tokens"] == int(generate["kv cache"] / p.kv["bytes_per_token"])
    assert p.kv["group_tokens"] == 20_000 + 8 * 4096
    # the engine sleeps during the passes: none of its memory there
    assert not any(k.startswith("engine") for k in p.phase("update").parts)
    # 128 frames of 1080p at 2 fps under 262,144 pixels per frame: 384 x 672 (patch 16, merge 2)
    assert p.work.frames == 128 and p.work.frame_size == (384, 672)
    assert p.work.video_tokens == 64 * (384 // 32) * (672 // 32)
    # the logits of the kept positions in bf16, and their gradient in the update
    mb = next(m for m in p.work.micro_batches if m.name == "most responses")
    assert mb.kept == 5 * 4096  # (24,576 - 256) // 4,096 responses behind a short prompt
    logits = mb.kept * 151_936 * 2
    chunks = 2 * (128 * 2**20 // (4 * 151_936)) * 151_936 * 4  # two float32 chunks of 220 positions
    assert p.phase("logprobs").parts["logits"] == pytest.approx(logits + chunks)


def test_a_run_that_does_not_fit_names_the_phase_and_the_settings_that_fix_it(arch_8b, capsys):
    # 32k-token responses, four sequences per micro-batch (no token budget)
    over = [
        "rollout.max_new_tokens=32768",
        "trainer.micro_batch_size=4",
        "trainer.max_tokens_per_micro_batch=0",
    ]
    d = _plan_json(capsys, f"config={RECIPE_8B}", "--gpus", "8", "--gpu-memory", "80", *over)
    assert d["fits"] is False
    assert any("rollout.vllm.max_model_len=24576 is shorter" in note for note in d["notes"])
    failing = [p for p in d["phases"] if not p["fits"]]
    assert [p["name"] for p in failing] == ["logprobs", "update"] and failing[1]["peak_gib"] > 80
    fixes = failing[1]["fixes"]
    assert fixes[0] == {
        "key": "trainer.micro_batch_size",
        "value": 1,
        "peak_gib": pytest.approx(fixes[0]["peak_gib"]),
    }
    assert 1 <= len(fixes) <= 2
    cfg = load_config(RunConfig, RECIPE_8B, over)
    for fix in fixes:  # each named setting alone makes the phase fit
        hw = Hardware(gpus=8, memory_gib=80.0)
        if fix["key"] == "plan.gpus":
            hw = Hardware(gpus=fix["value"], memory_gib=80.0)
            fixed = plan(cfg, hw, arch_8b)
        else:
            fixed = plan(_with(cfg, fix["key"], fix["value"]), hw, arch_8b)
        assert fixed.phase("update").peak_gib < 80
        assert fix["peak_gib"] == pytest.approx(fixed.phase("update").peak_gib, abs=1e-3)
    # the readable table says the same
    assert main(["plan", f"config={RECIPE_8B}", "--gpus", "8", "--gpu-memory", "80", "--check", *over]) == 3
    text = capsys.readouterr().out
    assert "NO FIT" in text and f"fits with {fixes[0]['key']}=" in text


def test_a_kv_cache_shorter_than_one_sequence_does_not_fit(arch_8b):
    cfg = load_config(RunConfig, RECIPE_8B, ["rollout.vllm.gpu_memory_utilization=0.22"])
    p = plan(cfg, Hardware(gpus=8, memory_gib=80.0), arch_8b)
    generate = next(v for v in p.verdicts if v.phase.name == "generate")
    assert not generate.fits and "less than one sequence" in generate.reason
    assert generate.fixes and generate.fixes[0]["key"] == "rollout.vllm.gpu_memory_utilization"
    assert generate.fixes[0]["value"] > 0.22


def test_sharding_and_sequence_parallelism_divide_what_they_should(arch_8b):
    cfg = load_config(RunConfig, RECIPE_8B)
    one = plan(cfg, Hardware(gpus=8, memory_gib=80.0), arch_8b, fixes=False)
    more = plan(cfg, Hardware(gpus=16, memory_gib=80.0), arch_8b, fixes=False)
    assert more.phase("engine asleep").parts["optimizer"] == pytest.approx(
        one.phase("engine asleep").parts["optimizer"] / 2
    )
    sp = plan(_with(cfg, "distributed.sequence_parallel_size", 2), Hardware(gpus=8, memory_gib=80.0), arch_8b)
    assert sp.phase("update").parts["activations"] < 0.55 * one.phase("update").parts["activations"]


def test_typical_lengths_change_the_estimate_not_the_memory(arch_8b):
    cfg = load_config(RunConfig, RECIPE_8B)
    short = _with(_with(cfg, "plan.mean_prompt_tokens", 6000), "plan.mean_response_tokens", 800)
    worst = plan(cfg, Hardware(gpus=8, memory_gib=80.0), arch_8b, fixes=False)
    typical = plan(short, Hardware(gpus=8, memory_gib=80.0), arch_8b, fixes=False)
    assert [v.phase.peak_bytes for v in typical.verdicts] == [v.phase.peak_bytes for v in worst.verdicts]
    assert sum(c.seconds for c in typical.costs) < 0.5 * sum(c.seconds for c in worst.costs)


def test_refusals_are_one_line_and_name_the_key(tmp_path, capsys):
    assert main(["plan", "model.path=no/such-model"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model.path no/such-model" in err and "Qwen3-VL-8B" in err
    with pytest.raises(
        ConfigError, match="plan.gpus=6 is not a multiple of distributed.sequence_parallel_size=4"
    ):
        cfg = load_config(
            RunConfig, str(CONFIGS / "qwen3vl_8b_256f_sp.yaml"), ["distributed.sequence_parallel_size=4"]
        )
        plan(cfg, Hardware(gpus=6))
    assert main(["plan", f"config={RECIPE_8B}", "plan.gpu=tpu"]) == 2
    assert "plan.gpu must be one of h100, h200, a100, b200" in capsys.readouterr().err


def test_the_hf_engine_holds_the_kv_cache_of_the_ranks_sequences_in_one_batch():
    cfg = load_config(RunConfig, str(CONFIGS / "qwen3vl_2b_1gpu.yaml"), ["rollout.engine=hf"])
    p = plan(cfg, Hardware(gpus=1, memory_gib=80.0), fixes=False)
    generate = p.phase("generate").parts
    # 32 prompts x 8 responses of 12,288 + 2,048 tokens; K and V of 28 layers x 8 heads x 128 in bf16
    assert generate["hf kv cache"] == pytest.approx(32 * 8 * (12_288 + 2_048) * 2 * 28 * 8 * 128 * 2)
    assert not p.fits and [v.phase.name for v in p.verdicts if not v.fits] == ["generate"]
    assert [v.phase.name for v in p.verdicts] == PHASES[:4] and p.kv == {}  # no vLLM phases


def test_a_plan_of_smaller_videos_plans_fewer_vision_tokens(arch_8b):
    cfg = load_config(RunConfig, RECIPE_8B, ["plan.video_size=[448,252]", "plan.video_seconds=32"])
    work = plan(cfg, Hardware(gpus=8, memory_gib=80.0), arch_8b, fixes=False).work
    assert work.frames == 64 and work.frame_size == (256, 448)  # 2 fps of 32 s; 448x252 -> 448x256
    assert work.video_tokens == 32 * (256 // 32) * (448 // 32)
    with pytest.raises(ConfigError, match=r"plan.video_size must be \[width, height\]"):
        load_config(RunConfig, RECIPE_8B, ["plan.video_size=[448]"])


def test_a_distillation_teacher_is_planned_with_the_policy(arch_8b):
    """A checkpoint teacher (here the released 8B, for the 2B recipe) is held frozen in bf16 and
    sharded like the policy; offloaded it leaves the GPU; a reference self-teacher is a copy."""
    cfg = load_config(RunConfig, RECIPE_8B)
    teacher = ["algorithm.distill.objective=opd", "algorithm.distill.teacher=Qwen/Qwen3-VL-8B-Instruct"]
    p = plan(load_config(RunConfig, RECIPE_8B, teacher), Hardware(gpus=8, memory_gib=80.0), arch_8b)
    assert p.phase("generate").parts["teacher"] == pytest.approx(8_767_123_696 * 2 / 8)
    assert "teacher" not in plan(cfg, Hardware(gpus=8, memory_gib=80.0), arch_8b).phase("generate").parts
    offloaded = plan(
        load_config(RunConfig, RECIPE_8B, [*teacher, "algorithm.distill.offload=true"]),
        Hardware(gpus=8, memory_gib=80.0),
        arch_8b,
    )
    assert offloaded.phase("generate").parts["teacher"] == 0
    self_reference = [
        "algorithm.distill.objective=rlsd",
        "algorithm.distill.teacher=self",
        "algorithm.distill.self_teacher=reference",
    ]
    p = plan(load_config(RunConfig, RECIPE_8B, self_reference), Hardware(gpus=8, memory_gib=80.0), arch_8b)
    assert p.phase("generate").parts["reference"] == pytest.approx(8_767_123_696 * 2 / 8)
