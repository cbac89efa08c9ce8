"""The adapter-only sync's parts that need no vLLM: the adapter files the handoff writes, the
vision-tower refusal, vLLM's rank choices and the setting's check."""

from __future__ import annotations

import os

import pytest
import torch

pytest.importorskip("peft")

from easyvideor1.models.lora import attach_lora  # noqa: E402
from easyvideor1.models.tiny import make_tiny_model  # noqa: E402
from easyvideor1.rollout.kinds.vllm import adapter_sync_applies  # noqa: E402
from easyvideor1.rollout.vllm import _vllm_lora_rank  # noqa: E402
from easyvideor1.trainer.config import LoraConfig  # noqa: E402
from easyvideor1.trainer.handoff import EngineHandoff  # noqa: E402


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, one_thread) -> str:
    return make_tiny_model(str(tmp_path_factory.mktemp("tiny")))


def _load(model_dir: str, **lora):
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(model_dir)
    if lora:
        torch.manual_seed(0)
        attach_lora(model, LoraConfig(**lora), freeze_vision_tower=False)
    return model


class AdapterEngine:
    """Stands in for a vLLM engine started with ``max_lora_rank``: records what it is sent."""

    owns_weights, adapter_sync = True, True

    def __init__(self) -> None:
        self.adapters: list[dict[str, torch.Tensor]] = []
        self.weights_pushed = 0

    def update_adapter(self, adapter_dir: str) -> None:
        from safetensors.torch import load_file

        assert os.path.isfile(os.path.join(adapter_dir, "adapter_config.json"))
        self.adapters.append(load_file(os.path.join(adapter_dir, "adapter_model.safetensors")))

    def update_weights(self, named_tensors) -> None:
        self.weights_pushed += 1


def test_the_handoff_sends_the_adapter_as_peft_files_that_reproduce_the_policy(model_dir) -> None:
    from peft import PeftModel

    model = _load(model_dir, rank=4, alpha=8)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    engine = AdapterEngine()
    handoff = EngineHandoff(engine, model)
    handoff.push()
    directory = handoff._adapter_dir
    assert engine.weights_pushed == 0 and len(engine.adapters) == 1
    sent = engine.adapters[0]
    assert sent and all(".lora_A." in k or ".lora_B." in k for k in sent)  # adapter bytes only
    # PEFT's own loader on the written files gives the policy's function
    loaded = PeftModel.from_pretrained(_load(model_dir), directory).eval()
    ids = torch.tensor([[5, 17, 40, 99, 3]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(input_ids=ids).logits, model.eval()(input_ids=ids).logits)
    handoff.push()  # rewritten in place for the next update
    assert len(engine.adapters) == 2 and os.path.isdir(directory)
    handoff.close()
    assert not os.path.exists(directory)


def test_adapter_sync_applies_to_language_model_adapters_only(model_dir) -> None:
    assert adapter_sync_applies(_load(model_dir)) is False  # no LoRA: the full weights are pushed
    assert adapter_sync_applies(_load(model_dir, rank=4)) is True
    with pytest.raises(
        ValueError, match="rollout.vllm.lora_sync=adapter: the adapter reaches the vision tower"
    ):
        adapter_sync_applies(_load(model_dir, rank=4, vision=True))


def test_vllm_rank_choices_and_the_setting() -> None:
    from easyvideor1.rollout.config import VLLMConfig

    assert [_vllm_lora_rank(r) for r in (1, 2, 8, 9, 64, 300)] == [1, 8, 8, 16, 64, 320]
    with pytest.raises(ValueError, match="above vLLM's largest"):
        _vllm_lora_rank(1024)
    with pytest.raises(ValueError, match="rollout.vllm.lora_sync"):
        VLLMConfig(lora_sync="weights")
