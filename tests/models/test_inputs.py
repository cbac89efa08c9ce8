"""Prompt batches expand into sequence batches with each prompt's own vision tensors; a share of
a batch's prompts is the batch those prompts encode to on their own."""

from __future__ import annotations

import torch
from PIL import Image

from easyvideor1.data.config import DataConfig
from easyvideor1.data.dataset import RecordDataset, encode_prompts
from easyvideor1.data.records import parse_record
from easyvideor1.models.inputs import gather_prompts, select_prompts
from easyvideor1.models.tiny import build_processor
from tests.conftest import make_video


def _batch(tmp_path):
    """Four prompts (video, text, video + image, image): (processor, dataset, config, batch)."""
    video = make_video(tmp_path, "v", fps=10, duration=1, size=(64, 64))
    Image.new("RGB", (64, 64), "red").save(tmp_path / "i.png")
    records = [
        parse_record({"problem": "video", "videos": [video]}, "f[0]"),
        parse_record({"problem": "text only"}, "f[1]"),
        parse_record({"problem": "both", "videos": [video], "images": [str(tmp_path / "i.png")]}, "f[2]"),
        parse_record({"problem": "image", "images": [str(tmp_path / "i.png")]}, "f[3]"),
    ]
    cfg = DataConfig(
        model_family="qwen3vl",
        video_nframes=2,
        video_fps=None,
        video_min_pixels=1024,
        video_max_pixels=4096,
        image_max_pixels=4096,
    )
    ds = RecordDataset(records, cfg, str(tmp_path / "d.jsonl"))
    processor = build_processor()
    batch = encode_prompts(processor, [ds[i] for i in range(4)], cfg, ds.loader)
    return processor, ds, cfg, batch


def test_gather_prompts_keeps_each_prompts_media(tmp_path):
    processor, ds, cfg, batch = _batch(tmp_path)
    assert (batch.video_counts, batch.image_counts) == ([1, 0, 1, 0], [0, 0, 1, 1])
    for order in ([2, 0, 0, 1], [1, 1], [3, 2]):
        got = gather_prompts(batch, order)
        singles = [encode_prompts(processor, [ds[i]], cfg, ds.loader).inputs for i in order]
        for key in ("pixel_values_videos", "pixel_values"):
            parts = [s[key] for s in singles if key in s]
            if parts:
                assert torch.equal(got[key], torch.cat(parts)), (order, key)
            else:
                assert key not in got, (order, key)
        assert got["input_ids"].shape[0] == len(order)


def test_select_prompts_is_the_batch_of_those_prompts_alone(tmp_path):
    """What a sequence-parallel rank generates from (and an episode's first turn): the rows, their
    media, their raw prompts, cut to the padding they need."""
    processor, ds, cfg, batch = _batch(tmp_path)
    for rows in ([1, 2], [3], [0, 1, 2, 3]):
        got = select_prompts(batch, rows)
        alone = encode_prompts(processor, [ds[i] for i in rows], cfg, ds.loader)
        assert (got.video_counts, got.image_counts) == (alone.video_counts, alone.image_counts)
        assert got.texts == alone.texts and len(got.media) == len(rows)
        assert set(got.inputs) == set(alone.inputs), rows
        for key, value in alone.inputs.items():
            assert torch.equal(got.inputs[key], value), (rows, key)


def test_inputs_go_to_the_device_a_model_computes_on_not_to_its_offloaded_shards() -> None:
    from easyvideor1.models.inputs import COMPUTE_DEVICE_ATTR, compute_device

    model = torch.nn.Linear(2, 2)
    assert compute_device(model) == torch.device("cpu")  # its parameters' device
    # FSDP2 with CPU offload keeps the shards on the CPU and gathers them to the rank's GPU:
    # sharding records that device, and the log-prob path and the step's pixels follow it
    setattr(model, COMPUTE_DEVICE_ATTR, torch.device("meta"))
    assert compute_device(model) == torch.device("meta")
