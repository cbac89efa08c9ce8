"""The planner's architecture facts: every family's tiny model counted on the meta device equals
the same model built for real, part by part; every released size's count equals its checkpoint's
published size; LoRA adapter counts equal what peft attaches."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForImageTextToText

from easyvideor1.errors import ConfigError, UserError
from easyvideor1.models.families import family_names, get_family
from easyvideor1.models.families.registry import released_config, released_names
from easyvideor1.models.lora import adapter_parameters, attach_lora
from easyvideor1.models.tiny import tiny_config
from easyvideor1.plan.architecture import Architecture, architecture
from easyvideor1.trainer.config import LoraConfig

# Each released size's published parameter count: the checkpoint's safetensors total (its
# model.safetensors.index.json metadata.total_size / 2 bytes of bf16; a tied LM head is stored
# once), as the hub reports it
PUBLISHED = {
    "Qwen/Qwen3-VL-2B-Instruct": 2_127_532_032,
    "Qwen/Qwen3-VL-4B-Instruct": 4_437_815_808,
    "Qwen/Qwen3-VL-8B-Instruct": 8_767_123_696,
    "Qwen/Qwen2.5-VL-3B-Instruct": 3_754_622_976,
    "Qwen/Qwen2.5-VL-7B-Instruct": 8_292_166_656,
    "Qwen/Qwen3-VL-30B-A3B-Instruct": 31_070_754_032,
    "Qwen/Qwen3.5-9B": 9_409_813_744,
}
# where each family's vision side (tower, merger, InternVL's projector) lives in the model
VISION_PREFIXES = ("model.visual.", "model.vision_tower.", "model.multi_modal_projector.")


def tiny(family: str):
    """The family's tiny config (token ids in the special tokens' order) and that model built on
    the CPU."""
    ids = {token: i for i, token in enumerate(get_family(family).tokens.special_tokens)}
    config = tiny_config(family, 600, ids)
    torch.manual_seed(0)
    return config, AutoModelForImageTextToText.from_config(config)


def numel(params) -> int:
    return sum(p.numel() for p in params)


@pytest.mark.parametrize("name", released_names())
def test_released_size_counts_its_published_parameters(name):
    assert architecture(name).params.total == PUBLISHED[name]


def test_every_released_size_has_a_published_count():
    assert set(released_names()) == set(PUBLISHED)


def test_released_8b_facts():
    arch = architecture("Qwen/Qwen3-VL-8B-Instruct")
    assert (arch.model_type, arch.text.hidden, arch.text.layers, arch.text.kv_heads) == (
        "qwen3_vl",
        4096,
        36,
        8,
    )
    assert not arch.text.tied_embeddings and arch.text.attention_layers == 36
    assert (arch.vision.depth, arch.vision.patch_size, arch.vision.deepstack, arch.vision.out_hidden) == (
        27,
        16,
        3,
        4096,
    )
    p = arch.params
    assert p.lm_head == p.embeddings == 151936 * 4096 == p.largest_tensor
    assert p.active_per_token == p.layers + p.lm_head


def test_released_names_match_any_case_and_by_last_part():
    assert released_config("qwen/qwen3-vl-2b-instruct") == released_config("Qwen3-VL-2B-Instruct")
    assert released_config("Qwen3-VL-2B-Instruct")["model_type"] == "qwen3_vl"
    assert architecture("QWEN2.5-VL-3B-INSTRUCT").text.tied_embeddings
    assert released_config("Qwen/Qwen3-VL-9B-Instruct") is None


def test_unknown_model_path_names_the_known_sizes(tmp_path):
    with pytest.raises(
        ConfigError, match=r"model.path .*nothing: no config.json there .*known: .*Qwen3-VL-8B"
    ):
        architecture(str(tmp_path / "nothing"))


def test_model_directory_reads_its_config_json(tmp_path):
    config, model = tiny("qwen3_vl")
    config.save_pretrained(tmp_path)
    arch = architecture(str(tmp_path))
    assert arch.name == str(tmp_path) and arch.params.total == numel(model.parameters())
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(UserError, match="model_type 'llama' is not a supported family"):
        architecture(str(tmp_path))


@pytest.mark.parametrize("family", family_names())
def test_meta_counts_equal_the_real_model_part_by_part(family):
    config, model = tiny(family)
    arch = Architecture.from_config(config, family)
    named = dict(model.named_parameters())
    embed, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    language = {n: p for n, p in named.items() if n.startswith("model.language_model.")}
    p = arch.params
    assert p.total == numel(model.parameters())
    assert p.vision == numel(v for n, v in named.items() if n.startswith(VISION_PREFIXES))
    assert p.embeddings == embed.numel()
    assert p.layers == numel(language.values()) - embed.numel()
    assert p.lm_head == (0 if head is embed else head.numel())
    assert p.largest_tensor == max(v.numel() for v in named.values())
    units = [m for m in model.modules() if type(m).__name__ in model._no_split_modules]
    assert p.largest_unit == max(numel(u.parameters()) for u in units)
    assert p.root_unit == p.total - sum(numel(u.parameters()) for u in units)

    text, vision = arch.text, arch.vision
    assert text.layers == len(model.model.language_model.layers) == text.attention_layers + text.linear_layers
    assert text.vocab == embed.shape[0] and text.hidden == embed.shape[1]
    assert text.tied_embeddings == (head is embed)
    blocks = [u for u in units if not any(u is layer for layer in model.model.language_model.layers)]
    assert vision.depth == len(blocks)
    assert vision.out_hidden == text.hidden
    assert vision.patch_size * vision.merge_size == get_family(family).frames.factor
    assert vision.temporal_patch_size == get_family(family).frames.temporal_patch_size
    if not get_family(family).engine.moe:
        assert p.active_per_token == p.layers + head.numel()


def test_moe_active_parameters_go_through_top_k_experts():
    config, model = tiny("qwen3_vl_moe")
    arch = Architecture.from_config(config, "moe")
    text = arch.text
    assert (text.experts, text.experts_per_token, text.expert_intermediate, text.intermediate) == (
        4,
        2,
        96,
        0,
    )
    experts = numel(v for n, v in model.named_parameters() if ".mlp.experts." in n)
    assert arch.params.active_per_token == arch.params.layers - experts // 2 + model.lm_head.weight.numel()


def test_shared_experts_by_either_naming():
    assert Architecture.from_config(*tiny("qwen3_5_moe")[:1], "q").text.shared_expert_intermediate == 128
    glm = Architecture.from_config(tiny("glm4v_moe")[0], "g").text
    assert (glm.experts, glm.shared_expert_intermediate, glm.intermediate) == (4, 64, 256)


def test_deltanet_layers_hold_a_fixed_state():
    text = Architecture.from_config(tiny("qwen3_5")[0], "q").text
    assert (text.linear_layers, text.attention_layers) == (1, 1)
    # conv over q, k and v (2 heads of 128 each) keeps kernel - 1 = 3 inputs; two 128 x 128 heads
    assert text.linear_state_elements == 768 * 3 + 2 * 128 * 128


@pytest.mark.parametrize("family", ["qwen3_vl", "internvl", "qwen3_5_moe"])
@pytest.mark.parametrize(
    "lora",
    [
        LoraConfig(rank=4),
        LoraConfig(rank=8, vision=True),
        LoraConfig(rank=2, target_modules=["q_proj", "v_proj"]),
        LoraConfig(rank=2, target_modules=["down_proj", "lm_head"]),
    ],
    ids=["default", "vision", "attention", "named"],
)
def test_lora_params_equal_what_peft_attaches(family, lora):
    config, model = tiny(family)
    arch = Architecture.from_config(config, family)
    attach_lora(model, lora)
    attached = numel(adapter_parameters(model).values())
    assert attached > 0
    assert arch.params.lora_params(lora.rank, lora.target_modules, lora.vision) == attached


def test_lora_target_matching_no_layer_is_refused():
    arch = Architecture.from_config(tiny("qwen3_vl")[0], "q")
    with pytest.raises(ConfigError, match=r"model.lora.target_modules: \['nope'\] match no linear layer"):
        arch.params.lora_params(4, ["q_proj", "nope"], vision=False)
