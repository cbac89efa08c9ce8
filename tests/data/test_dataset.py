"""Samples carry paths; frames reach the HF processor unchanged with their real metadata."""

from __future__ import annotations

import re

import pytest
import torch
from torch.utils.data import DataLoader

from easyvideor1.data.config import DataConfig
from easyvideor1.data.dataset import MediaSample, RecordDataset, build_content, encode_sample
from easyvideor1.data.preprocess import preprocess
from easyvideor1.data.records import RecordError, parse_record
from easyvideor1.models.tiny import build_processor
from tests.conftest import make_video

CFG = dict(model_family="qwen3vl", video_fps=2.0, video_min_pixels=4 * 32 * 32, video_max_pixels=16 * 32 * 32)


@pytest.fixture(scope="module")
def processor():
    return build_processor("qwen3vl")


@pytest.fixture(scope="module")
def dataset_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("ds")
    make_video(d, "clip", fps=10, duration=3, size=(96, 64))
    from PIL import Image

    Image.new("RGB", (50, 40), "blue").save(d / "pic.png")
    rows = [
        '{"problem_id": "v", "problem": "<video>What happens?", "answer": "x", "videos": ["clip.mp4"]}',
        '{"problem_id": "iv", "problem": "Compare them.", "answer": "x", "videos": ["clip.mp4"], "images": ["pic.png"]}',
        '{"problem_id": "t", "problem": "2+2?", "answer": "4"}',
    ]
    (d / "data.jsonl").write_text("\n".join(rows) + "\n")
    return d


def test_content_placeholders_and_fallback():
    r = parse_record(
        {"problem": "Look <image> then <video> and say", "videos": ["v"], "images": ["i"]}, "f[0]"
    )
    assert [c["type"] for c in build_content(r)] == ["text", "image", "text", "video", "text"]
    r = parse_record({"problem": "No placeholder", "videos": ["v"], "images": ["i"]}, "f[0]")
    assert [c["type"] for c in build_content(r)] == ["image", "video", "text"]
    r = parse_record({"problem": "<video><video>", "videos": ["v"]}, "f[0]")
    with pytest.raises(RecordError, match="2 <video> placeholder"):
        build_content(r)


def test_cached_and_decoded_inputs_are_identical_with_true_timestamps(processor, dataset_files, tmp_path):
    data = str(dataset_files / "data.jsonl")
    from easyvideor1.data.records import load_records

    records = load_records(data)
    cache = tmp_path / "cache"
    assert preprocess([data], DataConfig(**CFG), str(cache), workers=1, progress=False)["built"] == 1
    cached_ds = RecordDataset(records, DataConfig(**CFG, cache_dir=str(cache), cache_mode="cache_only"), data)
    decoded_ds = RecordDataset(records, DataConfig(**CFG, cache_mode="decode_only"), data)
    s_cached, s_decoded = cached_ds[0], decoded_ds[0]
    assert s_cached.video_entries[0] and s_cached.video_entries[0].endswith(".safetensors")
    assert s_decoded.video_entries == [None]
    a = encode_sample(processor, s_cached, cached_ds.cfg, cached_ds.loader)
    b = encode_sample(processor, s_decoded, decoded_ds.cfg, decoded_ds.loader)
    assert cached_ds.loader.stats.hits == 1 and decoded_ds.loader.stats.decoded == 1
    assert torch.equal(a["input_ids"], b["input_ids"])
    assert torch.equal(a["pixel_values_videos"], b["pixel_values_videos"])
    assert torch.equal(a["video_grid_thw"], b["video_grid_thw"])
    # 3 s at 10 fps sampled at 2 fps -> 6 frames, indices 0,6,12,17,23,29 -> pairs at 0.3, 1.45, 2.6 s
    text = processor.tokenizer.decode(a["input_ids"][0])
    assert re.findall(r"<([\d.]+) seconds>", text) == ["0.3", "1.4", "2.6"]


def test_image_video_and_text_samples_encode(processor, dataset_files):
    data = str(dataset_files / "data.jsonl")
    from easyvideor1.data.records import load_records

    ds = RecordDataset(load_records(data), DataConfig(**CFG, image_max_pixels=8 * 32 * 32), data)
    both = encode_sample(processor, ds[1], ds.cfg, ds.loader)
    assert "pixel_values" in both and "pixel_values_videos" in both
    h, w = (both["image_grid_thw"][0, 1:] * 16).tolist()
    assert h * w <= 8 * 32 * 32 and h % 32 == 0 and w % 32 == 0  # the image budget, not the video one
    text_only = encode_sample(processor, ds[2], ds.cfg, ds.loader)
    assert "pixel_values_videos" not in text_only


def test_dataloader_workers_carry_paths_not_tensors(dataset_files):
    data = str(dataset_files / "data.jsonl")
    from easyvideor1.data.records import load_records

    ds = RecordDataset(load_records(data), DataConfig(**CFG), data)
    batches = list(DataLoader(ds, batch_size=3, num_workers=2, collate_fn=list))
    samples = [s for b in batches for s in b]
    assert len(samples) == 3 and all(isinstance(s, MediaSample) for s in samples)
    assert samples[0].videos[0].endswith("clip.mp4") and not any(
        isinstance(v, torch.Tensor) for s in samples for v in vars(s).values()
    )


def test_qwen2_5_family_uses_factor_28(dataset_files):
    data = str(dataset_files / "data.jsonl")
    from easyvideor1.data.records import load_records

    cfg = DataConfig(
        model_family="qwen2_5vl", video_fps=2.0, video_min_pixels=4 * 28 * 28, video_max_pixels=16 * 28 * 28
    )
    ds = RecordDataset(load_records(data), cfg, data)
    out = encode_sample(build_processor("qwen2_5vl"), ds[0], cfg, ds.loader)
    t, gh, gw = out["video_grid_thw"][0].tolist()
    assert (gh * 14) % 28 == 0 and (gw * 14) % 28 == 0 and t == 3


def test_qwen2_5_second_per_grid_ts_follows_the_sample_fps_in_clip_windows(dataset_files):
    cfg = DataConfig(
        model_family="qwen2_5vl", video_fps=4.0, video_min_pixels=4 * 28 * 28, video_max_pixels=16 * 28 * 28
    )
    rec = parse_record({"problem": "q", "videos": ["clip.mp4"], "video_start": 0.5, "video_end": 2.5}, "f[0]")
    ds = RecordDataset([rec], cfg, str(dataset_files / "data.jsonl"))
    sample = ds[0]
    video = ds.loader.load(sample.videos[0], sample.video_params)
    out = encode_sample(build_processor("qwen2_5vl"), sample, cfg, ds.loader)
    m = video.meta
    assert m["window_frames"] < m["total_frames"]
    assert m["sample_fps"] == pytest.approx(len(m["frame_indices"]) / m["window_frames"] * m["source_fps"])
    assert float(out["second_per_grid_ts"][0]) == pytest.approx(2 / video.meta["sample_fps"])
