"""``model.attn_implementation``: checked where the config is read, refused at load time when the
kernel's package is missing (so GPU recipes still parse on the CPU), and set on every part of the
model (language model and vision tower) and its copies."""

from __future__ import annotations

import copy

import pytest

from easyvideor1.models import loading
from easyvideor1.models.loading import check_attention, load_policy
from easyvideor1.models.tiny import make_tiny_model
from easyvideor1.trainer.config import ModelConfig


def test_the_key_is_checked_when_the_config_is_read():
    assert ModelConfig().attn_implementation == "sdpa"
    with pytest.raises(ValueError, match=r"model.attn_implementation.*sdpa, eager, flash_attention_2") as e:
        ModelConfig(attn_implementation="flash")
    assert "\n" not in str(e.value)
    # flash-attention parses without the package: a GPU recipe is checked on any machine
    assert ModelConfig(attn_implementation="flash_attention_2").attn_implementation == "flash_attention_2"


def test_flash_attention_is_refused_at_load_time_without_its_package(monkeypatch):
    monkeypatch.setattr(loading.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ImportError, match="pip install flash-attn --no-build-isolation") as e:
        check_attention("flash_attention_2")
    assert "\n" not in str(e.value)
    check_attention("sdpa")  # the others need nothing
    check_attention("eager")
    monkeypatch.setattr(loading.importlib.util, "find_spec", lambda name: object())
    check_attention("flash_attention_2")


def test_the_setting_reaches_the_text_model_the_vision_tower_and_copies(tmp_path):
    model, _ = load_policy(
        make_tiny_model(str(tmp_path / "m"), "qwen3_vl", layers=1), attn_implementation="eager"
    )
    reference = copy.deepcopy(model)  # how the KL reference and rollout copies are made
    for m in (model, reference):
        config = m.config
        assert {config._attn_implementation, config.text_config._attn_implementation} == {"eager"}
        assert config.vision_config._attn_implementation == "eager"


def test_gpu_recipes_train_padding_free_on_flash_attention():
    """Every GPU recipe packs its micro-batches, on flash-attention, with a token budget that holds
    at least one longest sequence (a prompt at its limit plus a full response)."""
    from pathlib import Path

    from easyvideor1.config import RunConfig, load_config

    recipes = sorted((Path(__file__).resolve().parents[2] / "configs").glob("qwen3vl_*.yaml"))
    assert len(recipes) >= 3
    for path in recipes:
        cfg = load_config(RunConfig, str(path), [])
        assert cfg.model.attn_implementation == "flash_attention_2" and cfg.trainer.padding_free, path.name
        longest = cfg.data.max_prompt_length + cfg.rollout.max_new_tokens
        assert cfg.trainer.max_tokens_per_micro_batch >= longest, path.name
