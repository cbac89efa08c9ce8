"""InternVL3.5's layout (one ``pixel_values`` of image tiles and video frames, no grids), checked
on a real tiny InternVL: our pre-sampled inputs equal the processor sampling and tiling itself,
prompt batches split and repeat each prompt's rows, reused vision features equal re-encoded ones
with one tower call per step, and the checkpoint decides the frame size."""

from __future__ import annotations

import copy
import json

import av
import numpy as np
import pytest
import torch
from PIL import Image
from transformers.video_utils import VideoMetadata

from easyvideor1.data.config import DataConfig
from easyvideor1.data.dataset import RecordDataset, encode_prompts, encode_sample, render_text
from easyvideor1.data.records import load_records
from easyvideor1.models.families import get_family
from easyvideor1.models.inputs import gather_prompts
from easyvideor1.models.loading import load_policy
from easyvideor1.models.logprobs import Packing, PolicyForward
from easyvideor1.models.tiny import make_tiny_model
from easyvideor1.models.vision import DummyVisionPass
from easyvideor1.models.vision_cache import VisionFeatureCache
from easyvideor1.resolve import resolve_data
from easyvideor1.rollout.base import banned_token_ids
from easyvideor1.trainer.update import experience_logprobs
from tests.conftest import make_video, write_modality_records

from ..trainer.dist_worker import KINDS, build_experience

FAMILY = get_family("internvl")


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> str:
    return make_tiny_model(str(tmp_path_factory.mktemp("internvl") / "model"), "internvl")


@pytest.fixture(scope="module")
def media(tmp_path_factory):
    """A 3 s 30 fps video and a wide image (tiled into 2 tiles + a thumbnail), in one record and alone."""
    d = tmp_path_factory.mktemp("ivl_media")
    make_video(d, "v", fps=30, duration=3.0, size=(80, 60))
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (50, 100, 3), dtype=np.uint8)).save(d / "i.png")
    base = {"problem": "What colour?", "answer": "A"}
    rows = [
        {
            **base,
            "problem_id": "mixed",
            "problem": "<image><video>What colour?",
            "videos": ["v.mp4"],
            "images": ["i.png"],
        },
        {**base, "problem_id": "text"},
        {**base, "problem_id": "video", "videos": ["v.mp4"]},
        {**base, "problem_id": "image", "images": ["i.png"]},
    ]
    (d / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return d / "data.jsonl"


def _dataset(media, model_dir, **kw):
    cfg = resolve_data(DataConfig(video_fps=None, video_nframes=4, cache_mode="decode_only", **kw), model_dir)
    return RecordDataset(load_records(str(media)), cfg, str(media))


def test_the_checkpoint_decides_the_frame_size(tiny, media):
    ds = _dataset(media, tiny)
    assert ds.cfg.video_max_pixels == 56 * 56  # read from the model's tile size
    assert ds[0].video_params.rule == "internvl"
    with pytest.raises(ValueError, match=r"data.video_max_pixels=1024 gives 28x28 .* 56x56"):
        _dataset(media, tiny, model_family="internvl", video_max_pixels=1024)
    # fps sampling is refused as the settings are read, once the family is known
    with pytest.raises(ValueError, match=r"fixed number of frames .* set data.video_nframes"):
        resolve_data(DataConfig(video_fps=2.0), tiny)


def test_pre_sampled_inputs_equal_the_processor_sampling_and_tiling_itself(tiny, media):
    _, processor = load_policy(tiny)
    ds = _dataset(media, tiny)
    sample = ds[0]
    ours = encode_sample(processor, sample, ds.cfg, ds.loader)
    # the processor's own path: every decoded frame + metadata, its sample_frames and resize;
    # the image as the file holds it, tiled by the processor
    with av.open(sample.videos[0]) as c:
        frames = np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])
    meta = VideoMetadata(total_num_frames=len(frames), fps=30.0, width=80, height=60)
    theirs = processor(
        text=[render_text(processor, sample)],
        images=[Image.open(sample.images[0]).convert("RGB")],
        videos=[torch.from_numpy(frames)],
        video_metadata=[meta],
        do_sample_frames=True,
        num_frames=4,
        return_tensors="pt",
    )
    assert set(ours) == set(theirs) == {"input_ids", "attention_mask", "pixel_values"}
    assert torch.equal(ours["input_ids"], theirs["input_ids"])
    assert torch.equal(ours["pixel_values"], theirs["pixel_values"])
    # 3 image tiles (2 + thumbnail) then 4 frames, rendered as Frame1..Frame4 lines
    assert ours["pixel_values"].shape == (7, 3, 56, 56)
    assert "Frame4: <img>" in processor.tokenizer.decode(ours["input_ids"][0])


def test_prompt_batches_split_and_repeat_each_prompts_rows(tiny, media):
    _, processor = load_policy(tiny)
    ds = _dataset(media, tiny)
    batch = encode_prompts(processor, [ds[i] for i in range(4)], ds.cfg, ds.loader)
    assert batch.pixel_rows == {"pixel_values": [7, 0, 4, 3]}
    for order in ([2, 0, 0, 1], [1, 1], [3, 2], [0]):
        got = gather_prompts(batch, order)
        singles = [encode_prompts(processor, [ds[i]], ds.cfg, ds.loader).inputs for i in order]
        parts = [s["pixel_values"] for s in singles if "pixel_values" in s]
        if parts:
            assert torch.equal(got["pixel_values"], torch.cat(parts)), order
        else:
            assert "pixel_values" not in got
        for row, single in zip(got["input_ids"], singles, strict=True):
            assert torch.equal(row[-single["input_ids"].shape[1] :], single["input_ids"][0])


def test_a_text_only_forward_makes_one_dummy_tower_call(tiny):
    model, _ = load_policy(tiny)
    dummy = DummyVisionPass(model)
    ids = torch.tensor([[1, 2, 3, 4]])
    with dummy.expect({"input_ids": ids}):
        model(input_ids=ids, labels=ids).loss.backward()
    assert dummy.calls == 1  # images and frames share one tower call
    assert all(p.grad is not None for p in model.parameters())


def test_reused_vision_features_equal_re_encoded_with_one_tower_call(tiny, tmp_path):
    records = write_modality_records(tmp_path, 4, 1)
    model, processor = load_policy(tiny, freeze_vision_tower=True)
    assert not any(p.requires_grad for m in FAMILY.vision.modules(model) for p in m.parameters())
    cfg = resolve_data(DataConfig(video_fps=None, video_nframes=4), tiny)
    exp = build_experience(processor, RecordDataset.from_files([records], cfg), list(KINDS))
    banned = banned_token_ids(processor.tokenizer)
    calls: list[int] = []
    cached_model = copy.deepcopy(model)
    FAMILY.vision.tower(cached_model).register_forward_hook(lambda *a: calls.append(1))
    fresh, _ = experience_logprobs(
        PolicyForward(model, DummyVisionPass(model), None, banned, packing=Packing(micro_batch_size=3)), exp
    )
    cache = VisionFeatureCache([cached_model])
    cache.start(exp.batch)
    reused, _ = experience_logprobs(
        PolicyForward(
            cached_model, DummyVisionPass(cached_model), cache, banned, packing=Packing(micro_batch_size=3)
        ),
        exp,
    )
    reused_again, _ = experience_logprobs(
        PolicyForward(
            cached_model, DummyVisionPass(cached_model), cache, banned, packing=Packing(micro_batch_size=2)
        ),
        exp,
    )
    cache.stop()
    m = exp.mask.bool()
    # one batched tower call over every row vs one per micro-batch: the same per-tile math, in
    # matrix products of other shapes (float32 rounding)
    worst = max(float((fresh[m] - r[m]).abs().max()) for r in (reused, reused_again))
    assert worst < 1e-5, worst
    assert len(calls) == cache.encodes == 1 and cache.served >= 3


def test_lora_defaults_leave_the_tower_and_projector_alone(tiny):
    """LoRA's default targets are the language model's linear layers: InternVL's projector sits
    beside its tower (Qwen-VL's merger is inside), and is excluded with it."""
    from easyvideor1.models import lora as L
    from easyvideor1.trainer.config import LoraConfig

    model, _ = load_policy(tiny, lora=LoraConfig(rank=4))
    adapted = {n.rsplit(".lora_", 1)[0] for n in L.adapter_parameters(model)}
    assert adapted and all(".language_model." in n for n in adapted)
    with_vision, _ = load_policy(tiny, lora=LoraConfig(rank=4, vision=True))
    names = set(L.adapter_parameters(with_vision))
    assert any(".vision_tower." in n for n in names) and any(".multi_modal_projector." in n for n in names)


def test_tool_episodes_are_refused_when_the_tools_are_set_up():
    from easyvideor1.tools.config import ToolsConfig
    from easyvideor1.tools.session import ToolSession

    with pytest.raises(
        ValueError, match="tools.names: internvl cannot run tool episodes .its processor gives no grid"
    ):
        ToolSession(ToolsConfig(names=["seek"]), "internvl")
