"""The family matrix: every registered family builds a tiny model that loads, names its family
from config.json, encodes cached and decoded inputs identically, trains a step through the dummy
vision pass with every parameter reached, and round-trips through a trainer checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from easyvideor1.data.config import DataConfig
from easyvideor1.data.dataset import RecordDataset, encode_sample, render_text
from easyvideor1.data.preprocess import preprocess
from easyvideor1.data.records import load_records
from easyvideor1.models.families import (
    family_names,
    family_of_checkpoint,
    family_of_model,
    get_family,
    resolve_model_family,
)
from easyvideor1.models.loading import load_policy
from easyvideor1.models.tiny import build_processor, make_tiny_model
from easyvideor1.models.vision import DummyVisionPass
from easyvideor1.resolve import resolve_data
from easyvideor1.trainer.checkpoint import save_checkpoint
from easyvideor1.trainer.distributed import decoder_layers
from tests.conftest import make_video

FAMILIES = family_names()


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    """A records file with one video + image prompt and one text-only prompt."""
    from PIL import Image

    d = tmp_path_factory.mktemp("media")
    make_video(d, "v", fps=8, duration=1.0, size=(64, 48))  # writes v.mp4
    Image.new("RGB", (40, 40), "red").save(d / "i.png")
    rows = [
        {
            "problem_id": "mixed",
            "problem": "<video><image>What colour?",
            "answer": "A",
            "videos": ["v.mp4"],
            "images": ["i.png"],
        },
        {"problem_id": "text", "problem": "What colour?", "answer": "A"},
    ]
    (d / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d / "data.jsonl"


@pytest.fixture(scope="module", params=FAMILIES)
def tiny(request, tmp_path_factory):
    return request.param, make_tiny_model(str(tmp_path_factory.mktemp(request.param)), request.param)


def test_tiny_model_loads_and_its_adapter_knows_it(tiny):
    name, path = tiny
    family = get_family(name)
    assert family_of_checkpoint(path) is family
    model, processor = load_policy(path, freeze_vision_tower=True)
    assert family_of_model(model) is family
    assert sum(p.numel() for p in model.parameters()) < 1_100_000
    # the vision tower is where the adapter says, and freezing it froze exactly it (and InternVL's
    # projector, which Qwen-VL towers hold as their merger)
    tower = family.vision.tower(model)
    expected_tower = model.model.vision_tower if name == "internvl" else model.model.visual
    assert tower is expected_tower
    frozen = {id(p) for m in family.vision.modules(model) for p in m.parameters()}
    assert frozen >= {id(p) for p in tower.parameters()}
    assert all(p.requires_grad != (id(p) in frozen) for p in model.parameters())
    # FSDP2 units from _no_split_modules: every decoder layer (linear- and full-attention alike) and
    # every vision block, each once
    units = decoder_layers(model)
    text_layers = list(model.model.language_model.layers)
    blocks = [m for m in tower.modules() if type(m).__name__ in model._no_split_modules]
    assert len(blocks) == 2
    assert [id(u) for u in units] == [id(m) for m in (*text_layers, *blocks)] or sorted(
        map(id, units)
    ) == sorted(map(id, (*text_layers, *blocks)))
    if family.engine.hybrid_attention:
        kinds = {lt for lt in model.config.text_config.layer_types}
        assert kinds == {"linear_attention", "full_attention"}
    # the per-frame cap is explicit in the saved processor (no "cap_pixels_per_frame" warning)
    assert (
        getattr(processor.video_processor, "cap_pixels_per_frame", None) == family.vision.cap_pixels_per_frame
    )
    assert type(processor).__name__ == family.vision.processor_class
    if hasattr(processor.video_processor, "merge_size"):  # Qwen-VL-style processors (and GLM's)
        assert (
            family.frames.factor
            == processor.video_processor.patch_size * processor.video_processor.merge_size
        )
    else:  # InternVL: patch 14, pixel shuffle 0.5 (2x2 patches per token)
        vision = model.config.vision_config
        assert family.frames.factor == vision.patch_size[0] * round(1 / model.config.downsample_ratio)


def _dataset(media, cfg):
    return RecordDataset(load_records(str(media)), cfg, str(media))


def test_cached_and_decoded_inputs_identical_and_a_step_reaches_every_parameter(
    tiny, media, tmp_path, caplog
):
    from transformers.utils import logging as hf_logging

    name, path = tiny
    base = resolve_data(
        DataConfig(video_fps=None, video_nframes=4, video_min_pixels=1024, video_max_pixels=4096), path
    )
    assert get_family(base.model_family) is get_family(name)
    cache = tmp_path / "cache"
    assert preprocess([str(media)], base, str(cache), workers=1, progress=False)["built"] == 1
    from dataclasses import replace

    cached = _dataset(media, replace(base, cache_dir=str(cache), cache_mode="cache_only"))
    decoded = _dataset(media, replace(base, cache_mode="decode_only"))
    model, processor = load_policy(path)
    hf_logging.get_logger("transformers.models.qwen3_vl.video_processing_qwen3_vl").warning_once.cache_clear()
    caplog.set_level("WARNING")
    a = encode_sample(processor, cached[0], cached.cfg, cached.loader)
    b = encode_sample(processor, decoded[0], decoded.cfg, decoded.loader)
    assert "cap_pixels_per_frame" not in caplog.text
    family = get_family(name)
    # every tower call's pixels are there (Qwen-VL: videos and images apart; InternVL: together)
    assert a.keys() == b.keys() and all(key in a for key in family.vision.tower_calls.values())
    for k in a:
        assert torch.equal(torch.as_tensor(a[k]), torch.as_tensor(b[k])), k
    if "video_grid_thw" in a:
        # frames on the family's grid: patches per frame pair = (h / patch) * (w / patch)
        t, gh, gw = a["video_grid_thw"][0].tolist()
        assert t == 2 and (gh * family.frames.patch_size) % family.frames.factor == 0
    else:  # grid-less: the 4 frames and the image's one tile, each a 56x56 tile of the tiny model
        assert family.vision.pixel_rows(processor, a) == {"pixel_values": [5]}
        assert a["pixel_values"].shape[1:] == (3, 56, 56)

    # a text-only forward still calls the vision tower (dummy pass): every parameter gets a gradient
    dummy = DummyVisionPass(model)
    text = encode_sample(processor, decoded[1], decoded.cfg, decoded.loader)
    with dummy.expect(text):
        loss = model(**text, labels=text["input_ids"]).loss
    loss.backward()
    assert torch.isfinite(loss) and dummy.calls == len(family.vision.tower_calls)
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    assert not missing, missing[:5]


def test_checkpoint_round_trip_loads_with_from_pretrained(tiny, tmp_path):
    from transformers import AutoModelForImageTextToText, AutoProcessor

    name, path = tiny
    model, processor = load_policy(path)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with DummyVisionPass(model).expect({"input_ids": ids}):
        model(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    ckpt = save_checkpoint(tmp_path, 1, model, processor, opt, None, {})
    assert family_of_checkpoint(str(ckpt)) is get_family(name)
    # tensors the released checkpoints hold transposed (Qwen3-VL-MoE's fused experts) are on disk so
    from safetensors import safe_open

    ends = get_family(name).engine.transposed_in_checkpoints
    with safe_open(str(next(ckpt.glob("*.safetensors"))), "pt") as f:
        on_disk = {k: tuple(f.get_slice(k).get_shape()) for k in f.keys() if ends and k.endswith(ends)}
    live = dict(model.state_dict())
    assert bool(on_disk) == bool(ends)
    assert all(shape == tuple(live[k].transpose(1, 2).shape) for k, shape in on_disk.items())
    loaded = AutoModelForImageTextToText.from_pretrained(str(ckpt))
    AutoProcessor.from_pretrained(str(ckpt))
    want, got = model.state_dict(), loaded.state_dict()
    assert want.keys() == got.keys()
    assert all(torch.equal(want[k], got[k]) for k in want)


def test_qwen3_5_chat_template_thinking_as_its_processor_does(media):
    processor = build_processor("qwen3_5")
    sample = _dataset(media, DataConfig(model_family="qwen3_5"))[1]
    default = render_text(processor, sample)
    off = render_text(processor, sample, thinking=False)
    on = render_text(processor, sample, thinking=True)
    assert default.endswith("<|im_start|>assistant\n<think>\n") and on == default
    assert off.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    # Qwen-VL templates take no thinking switch: the flag changes nothing there
    qwen3vl = build_processor("qwen3vl")
    assert render_text(qwen3vl, sample, thinking=False) == render_text(qwen3vl, sample)


def test_family_comes_from_the_checkpoint_and_a_configured_one_is_checked(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3_5"}))
    assert resolve_model_family(None, str(tmp_path)) == "qwen3_5"
    assert resolve_model_family("qwen3.5", str(tmp_path)) == "qwen3.5"
    assert resolve_data(DataConfig(), str(tmp_path)).factor == 32
    with pytest.raises(ValueError, match="data.model_family is 'qwen2_5vl' but the model at .* is 'qwen3_5'"):
        resolve_data(DataConfig(model_family="qwen2_5vl"), str(tmp_path))
    with pytest.raises(ValueError, match="model family is not known"):
        DataConfig().sampling_params()
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llava"}))
    with pytest.raises(ValueError, match="model_type 'llava' is not a supported family"):
        family_of_checkpoint(str(tmp_path))
    with pytest.raises(ValueError, match="unknown model family 'llama'"):
        DataConfig(model_family="llama")


def test_aliases_and_factors():
    assert get_family("qwen3vl") is get_family("qwen3_vl") and get_family("Qwen2.5-VL") is get_family(
        "qwen2_5_vl"
    )
    assert get_family("GLM-4.1V") is get_family("glm4v")
    assert {n: get_family(n).frames.factor for n in FAMILIES} == {
        "glm4v": 28,
        "glm4v_moe": 28,
        "qwen2_vl": 28,
        "qwen2_5_vl": 28,
        "qwen3_vl": 32,
        "qwen3_vl_moe": 32,
        "qwen3_5": 32,
        "qwen3_5_moe": 32,
        "internvl": 28,
    }


@pytest.mark.parametrize("family", FAMILIES)
def test_every_tiny_model_has_heads_that_every_feature_can_split(family):
    """Sequence parallelism over 2 ranks splits the language model's heads (and a gated-DeltaNet
    layer's key and value heads); grouped-query attention needs fewer KV heads than query heads."""
    from easyvideor1.models.sequence_parallel import check_heads
    from easyvideor1.models.tiny import tiny_config

    ids = {token: i for i, token in enumerate(get_family(family).tokens.special_tokens)}
    text = tiny_config(family, 600, ids).text_config
    check_heads(text, 2, deltanet="linear_attention" in (getattr(text, "layer_types", None) or ()))
    assert text.num_key_value_heads < text.num_attention_heads
    assert text.num_attention_heads % text.num_key_value_heads == 0
