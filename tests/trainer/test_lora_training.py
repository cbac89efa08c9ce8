"""LoRA in the RL loop (issue 14): one model object (the KL reference is the adapter disabled),
an adapter-only optimizer, the trainable fraction logged, PEFT-format and merged checkpoints, exact
resume with a warmed-up reference, hybrid groups and packed micro-batches; and a 2-rank FSDP2 LoRA
step equal to the single-process one (torchrun, gloo)."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from easyvideor1.models.lora import adapter_parameters, reference_forward
from easyvideor1.trainer.loop import Trainer

from .conftest import free_port

HERE = Path(__file__).parent
# KL against the warmed-up adapter, hybrid groups, packed micro-batches: the paths LoRA touches
LORA = (
    "model.lora.rank=8",
    "model.lora.alpha=32",
    "algorithm.kl.type=k3",
    "trainer.sft_warmup_steps=2",
    "trainer.sft_batch_size=4",
    "rollout.hybrid=always",
    "trainer.padding_free=true",
)


def _instances(name: str) -> int:
    gc.collect()
    return sum(type(o).__name__ == name for o in gc.get_objects() if isinstance(o, torch.nn.Module))


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in open(path)]


def _logits(model, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.mark.slow
def test_lora_run_checkpoints_and_exact_resume(make_cfg, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    before = _instances("Qwen3VLForConditionalGeneration")
    out = tmp_path / "a"
    straight = Trainer(make_cfg(f"trainer.output_dir={out}", "trainer.export_merged=true", *LORA))
    # one model: no reference copy, no rollout copy (one process generates with the adapter on)
    assert _instances("Qwen3VLForConditionalGeneration") == before + 1
    assert straight.ref_model is None and straight.rollout_model is None
    adapters = adapter_parameters(straight.model)
    assert {id(p) for p in straight.optimizer.param_groups[0]["params"]} == {id(p) for p in adapters.values()}
    base = {k: v.clone() for k, v in straight.model.state_dict().items() if "lora_" not in k}
    straight.train()
    # the optimizer holds state for the adapters only
    assert straight.optimizer.state and {id(p) for p in straight.optimizer.state} <= {
        id(p) for p in adapters.values()
    }
    assert all(torch.equal(v, straight.model.state_dict()[k]) for k, v in base.items())  # base frozen
    rows = _rows(out / "metrics.jsonl")
    assert rows[0] == {"step": 0, "model/trainable_fraction": pytest.approx(straight.trainable_fraction)}
    assert 0 < straight.trainable_fraction < 0.1
    assert any(r.get("hybrid/groups_with_offline", 0) > 0 for r in rows)
    assert any(r.get("actor/kl_loss", 0) != 0 for r in rows)  # the warmed-up reference differs

    ckpt = out / "checkpoints" / "step_2"
    assert not (ckpt / "model.safetensors").exists()  # no copy of the frozen base per checkpoint
    assert (ckpt / "reference").is_dir()
    ids = torch.tensor([[5, 17, 42, 99, 7, 3, 250, 11]])
    model = straight.model.eval()
    policy = _logits(model, ids)
    fresh = AutoModelForImageTextToText.from_pretrained(make_cfg().model.path).eval()
    with reference_forward(model):  # adapter disabled = the base model, bit for bit
        assert torch.equal(_logits(model, ids), _logits(fresh, ids))
    loaded = PeftModel.from_pretrained(fresh, str(ckpt / "adapter")).eval()
    assert torch.equal(_logits(loaded, ids), policy)
    merged = AutoModelForImageTextToText.from_pretrained(str(ckpt / "merged")).eval()
    torch.testing.assert_close(_logits(merged, ids), policy, rtol=0, atol=1e-5)
    final = {k: v.detach().clone() for k, v in adapters.items()}
    reference = {k: v.clone() for k, v in straight.lora_reference.items()}
    straight.close()

    # interrupted after step 1, resumed to step 2: the same adapter and reference
    other = tmp_path / "b"
    Trainer(make_cfg(f"trainer.output_dir={other}", "trainer.max_steps=1", *LORA)).train()
    resumed = Trainer(make_cfg(f"trainer.output_dir={other}", *LORA))
    resumed.train()
    assert resumed.reference_moved
    now = adapter_parameters(resumed.model)
    for k, v in final.items():
        torch.testing.assert_close(now[k].detach(), v, rtol=0, atol=1e-6, msg=k)
    for k, v in reference.items():
        assert torch.equal(resumed.lora_reference[k], v), k
    a = {r["step"]: r for r in rows if "actor/pg_loss" in r}
    b = {r["step"]: r for r in _rows(other / "metrics.jsonl") if "actor/pg_loss" in r}
    for key in ("actor/pg_loss", "actor/kl_loss", "reward/overall"):
        assert a[2][key] == pytest.approx(b[2][key], rel=1e-5, abs=1e-7), key
    resumed.close()
    # the adapter belongs to its LoRA settings: a resume with others is refused, naming the key
    with pytest.raises(ValueError, match="model.lora.alpha changed since checkpoint"):
        Trainer(make_cfg(f"trainer.output_dir={other}", *LORA, "model.lora.alpha=64")).train()


def _load(path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, json.loads(f.metadata()["metrics"])


@pytest.mark.slow
def test_two_rank_lora_step_equals_single_process(demo_assets, tmp_path):
    """FSDP2 on 2 ranks (uneven 3 + 1 prompt split) vs one process: reference log-probs (adapter
    disabled) equal the base model's, and the loss and updated adapters agree to float32 rounding."""
    from tests.conftest import write_modality_records

    from .test_distributed import _env

    (tmp_path / "kinds").mkdir()
    records = write_modality_records(tmp_path / "kinds", 4, 0, ("A. red", "B. blue"))
    worker = [str(HERE / "lora_dist_worker.py"), str(demo_assets["model"]), records]
    single, double = tmp_path / "single.safetensors", tmp_path / "double.safetensors"
    r1 = subprocess.run([sys.executable, *worker, str(single)], capture_output=True, text=True, env=_env())
    assert r1.returncode == 0, r1.stderr[-3000:]
    port = free_port()
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master-addr=127.0.0.1"]
    r2 = subprocess.run(
        [*launch, f"--master-port={port}", *worker, str(double)],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert r2.returncode == 0, r2.stdout[-3000:] + r2.stderr[-3000:]
    w1, m1 = _load(single)
    w2, m2 = _load(double)
    # adapter disabled = the base model (to float rounding: another model object's kernels)
    assert m1["ref_logp"] == pytest.approx(m1["base_logp"], rel=1e-6, abs=1e-6)
    assert m1["ref_logp"] != m1["policy_logp"]  # the adapter matters
    for a, b in zip(m1["ref_logp"], m2["ref_logp"], strict=True):
        assert a == pytest.approx(b, rel=1e-5, abs=1e-6)
    assert m1["actor/pg_loss"] == pytest.approx(m2["actor/pg_loss"], rel=1e-5, abs=1e-7)
    assert m1["actor/grad_norm"] == pytest.approx(m2["actor/grad_norm"], rel=1e-5)
    assert w1.keys() == w2.keys() and w1 and all("lora_" in k for k in w1)
    assert max(float((w1[k] - w2[k]).abs().max()) for k in w1) < 1e-6
    assert m1["moved"] > 1e-4 and m2["moved"] > 1e-4  # the update did something


@pytest.mark.slow
def test_two_rank_lora_run_with_warmup_reference_resumes_in_one_process(demo_assets, tmp_path):
    """``easyvideor1 train`` under torchrun with LoRA: the SFT warm-up, the warmed-up adapter as
    KL reference (sharded snapshot), hybrid groups, HF rollouts from each rank's plain merged copy,
    a 2-rank checkpoint with the PEFT adapter and a merged export; then one process resumes it."""
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    from .test_distributed import _run, _torchrun, _train_args

    out = tmp_path / "run"
    extra = [*LORA, "trainer.save_every=1", "trainer.export_merged=true", "trainer.max_steps=1"]
    r = _torchrun(2, *_train_args(demo_assets, out, *extra))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ckpt = out / "checkpoints" / "step_1"
    assert len(list((ckpt / "reference").glob("*.safetensors"))) == 2  # one shard file per rank
    ids = torch.tensor([[5, 17, 42, 99, 7, 3, 250, 11]])
    base = AutoModelForImageTextToText.from_pretrained(demo_assets["model"]).eval()
    policy = _logits(PeftModel.from_pretrained(base, str(ckpt / "adapter")).eval(), ids)
    merged = AutoModelForImageTextToText.from_pretrained(str(ckpt / "merged")).eval()
    torch.testing.assert_close(_logits(merged, ids), policy, rtol=0, atol=1e-5)
    r = _run([sys.executable, *_train_args(demo_assets, out, *extra[:-1], "trainer.max_steps=2")])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert f"resumed from {ckpt}" in r.stdout
    steps = [m["step"] for m in _rows(out / "metrics.jsonl") if "actor/pg_loss" in m]
    assert steps == [1, 2]
