"""LoRA on a tiny Qwen3-VL (models/lora.py): targets, frozen base, the disabled-adapter reference,
PEFT-format adapters, merged exports and the settings' errors."""

from __future__ import annotations

import pytest
import torch

from easyvideor1.config import ConfigError, RunConfig, load_config
from easyvideor1.models import lora as L
from easyvideor1.models.loading import load_policy
from easyvideor1.models.tiny import make_tiny_model
from easyvideor1.trainer.config import LoraConfig


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return make_tiny_model(str(tmp_path_factory.mktemp("lora") / "model"), "qwen3vl")


def _base(path: str):
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(path).eval()


def _lora(path: str, **kw):
    model, processor = load_policy(path, lora=LoraConfig(rank=8, **kw))
    with torch.no_grad():  # B starts at zero (adapter = identity); give it values so it matters
        g = torch.Generator().manual_seed(0)
        for name, p in L.adapter_parameters(model).items():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return model.eval(), processor


IDS = torch.tensor([[5, 17, 42, 99, 7, 3, 250, 11, 64, 12]])


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=IDS).logits


def test_default_targets_are_the_language_models_linear_layers(tiny):
    model, _ = load_policy(tiny, lora=LoraConfig(rank=8))
    adapted = {n.rsplit(".lora_", 1)[0] for n in L.adapter_parameters(model)}
    assert adapted and all(".language_model." in n for n in adapted)
    leaves = {n.rsplit(".", 1)[-1] for n in adapted}
    assert leaves == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == set(L.adapter_parameters(model))  # the base, lm_head and tower are frozen
    n_train, n_total = L.parameter_counts(model)
    assert 0 < n_train / n_total < 0.1
    with_tower, _ = load_policy(tiny, lora=LoraConfig(rank=4, vision=True))
    assert any(".visual." in n for n in L.adapter_parameters(with_tower))


def test_disabled_adapter_is_the_base_model_and_the_adapter_comes_back(tiny):
    model, _ = _lora(tiny)
    policy = _logits(model)
    with L.reference_forward(model):
        reference = _logits(model)
    assert torch.equal(reference, _logits(_base(tiny)))  # bit for bit: the base weights, untouched
    assert (policy - reference).abs().max() > 1e-3  # the adapter matters
    assert torch.equal(_logits(model), policy)  # and is active again after
    assert all(p.requires_grad for p in L.adapter_parameters(model).values())


def test_a_snapshot_reference_is_the_snapshotted_adapter(tiny):
    model, _ = _lora(tiny)
    before = _logits(model)
    snapshot = L.adapter_snapshot(model)
    with torch.no_grad():
        for p in L.adapter_parameters(model).values():
            p.add_(0.01)
    moved = _logits(model)
    with L.reference_forward(model, snapshot):
        assert torch.equal(_logits(model), before)
    assert torch.equal(_logits(model), moved)
    L.copy_adapter(model, snapshot)
    with L.reference_forward(model, snapshot):
        assert torch.equal(_logits(model), moved)


def test_peft_format_adapter_and_merged_export_reproduce_the_policy(tiny, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    model, processor = _lora(tiny)
    policy = _logits(model)
    L.save_adapter(model, tmp_path / "adapter", {k: v for k, v in model.state_dict().items() if "lora_" in k})
    loaded = PeftModel.from_pretrained(_base(tiny), str(tmp_path / "adapter")).eval()
    assert torch.equal(_logits(loaded), policy)
    L.save_merged(model, tmp_path / "merged", processor)
    merged = AutoModelForImageTextToText.from_pretrained(str(tmp_path / "merged")).eval()
    assert not L.is_lora(merged) and not any("lora_" in n for n, _ in merged.named_parameters())
    torch.testing.assert_close(_logits(merged), policy, rtol=0, atol=1e-5)
    copy = L.plain_copy(model)  # the rollout copy under FSDP: plain, merged, separate
    assert not L.is_lora(copy) and L.is_lora(model)
    torch.testing.assert_close(_logits(copy), policy, rtol=0, atol=1e-5)


def test_target_modules_that_match_nothing_are_named(tiny):
    with pytest.raises(ValueError, match=r"model.lora.target_modules: \['qkv_nope'\] match no linear layer"):
        load_policy(tiny, lora=LoraConfig(rank=8, target_modules=["q_proj", "qkv_nope"]))
    with pytest.raises(ValueError, match="vision-tower layers .*freeze_vision_tower"):
        load_policy(tiny, freeze_vision_tower=True, lora=LoraConfig(rank=8, target_modules=["attn.qkv"]))
    model, _ = load_policy(tiny, lora=LoraConfig(rank=2, target_modules=["q_proj"]))
    assert {
        n.rsplit(".", 1)[-1] for n in (k.rsplit(".lora_", 1)[0] for k in L.adapter_parameters(model))
    } == {"q_proj"}


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.lora.rank=-1", "model.lora.rank must be a whole number >= 0"),
        ("model.lora.rank=1.5", "model.lora.rank"),
        ("model.lora.alpha=0", "model.lora.alpha must be > 0"),
        ("model.lora.dropout=1.0", "model.lora.dropout must be < 1"),
        ("model.lora.dropout=-0.1", r"model.lora.dropout must be in \[0, 1\]"),
    ],
)
def test_bad_lora_settings_name_their_key(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(RunConfig, None, [override])


def test_vision_lora_with_a_frozen_tower_is_refused():
    with pytest.raises(ConfigError, match="model.lora.vision adapts the vision tower"):
        load_config(
            RunConfig, None, ["model.lora.rank=4", "model.lora.vision=true", "model.freeze_vision_tower=true"]
        )
    assert load_config(RunConfig, None, ["model.lora.rank=8"]).model.lora.enabled
