"""GLM-4.1V's frame rule and prompt against transformers' own GLM-4.1V processor.

The reference is transformers run as a user would: its PyAV reader picks frames with
``Glm4vVideoProcessor.sample_frames`` and the processor resizes and renders them. Ours samples and
resizes with the ``glm4v`` frame rule (``media/frame_rules.py``) and hands the processor
finished frames (``do_sample_frames=False, do_resize=False``), as training and evaluation do.
"""

from __future__ import annotations

import json
import re
from fractions import Fraction

import pytest
import torch

from easyvideor1.data.config import DataConfig
from easyvideor1.data.dataset import RecordDataset, encode_sample
from easyvideor1.data.records import load_records
from easyvideor1.media.frame_rules import frame_rule
from easyvideor1.media.sampling import SamplingParams
from easyvideor1.media.video import sample_video
from easyvideor1.models.families import get_family
from easyvideor1.models.loading import load_policy
from easyvideor1.models.tiny import build_processor, make_tiny_model
from easyvideor1.resolve import resolve_data
from tests.conftest import make_video

GLM_FRAMES = get_family("glm4v").frames

# (name, fps, duration s, (width, height), codec): codecs whose containers declare a frame count
# (transformers' PyAV reader trusts it)
VIDEOS = [
    ("ntsc_film", Fraction(24000, 1001), 4.0, (64, 48), "h264"),
    ("sixty", 60, 3.0, (64, 36), "h264"),
    ("pal", 25, 6.0, (80, 44), "mpeg4"),
    ("half_second", 30, 0.5, (64, 48), "h264"),
    ("odd_size", 24, 2.0, (51, 37), "h264"),
    ("portrait", 30, 2.0, (36, 64), "h264"),
    ("tiny", 10, 2.0, (32, 24), "mjpeg"),
    ("fps_7", 7, 9.0, (56, 40), "h264"),
    ("hd", 24, 0.5, (640, 360), "h264"),
    # longer than GLM's 300 s: the processor switches to evenly spread frames
    ("six_minutes", 1, 330.0, (32, 24), "h264"),
]
# (name, our SamplingParams fields, the processor's call kwargs)
SETTINGS = [
    ("defaults", {}, {}),
    ("fps1", {"fps": 1.0}, {"fps": 1}),
    ("fps4_budget", {"fps": 4.0, "total_pixels": 8 * 28 * 28 * 4}, {"fps": 4, "size": 8 * 28 * 28 * 4}),
    ("min_budget", {"fps": 0.5, "min_pixels": 64 * 28 * 28}, {"fps": 0.5, "min": 64 * 28 * 28}),
]


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    d = tmp_path_factory.mktemp("glm_videos")
    return {
        name: make_video(d, name, fps=fps, duration=dur, size=size, codec=codec)
        for name, fps, dur, size, codec in VIDEOS
    }


def _reference(path: str, call: dict):
    """transformers' GLM-4.1V video processor on the file: the frames its ``sample_frames`` picks
    (from every frame its PyAV reader decodes: the reader itself would drop the repeated last
    frame of an odd count), resized and patched by the processor."""
    import numpy as np
    from transformers import Glm4vVideoProcessor
    from transformers.video_utils import load_video

    size = {
        "shortest_edge": call.get("min", 112 * 112),
        "longest_edge": call.get("size", 28 * 28 * 2 * 30000),
    }
    vp = Glm4vVideoProcessor(size=size)
    every, meta = load_video(
        path, backend="pyav", sample_indices_fn=lambda metadata, **_: np.arange(metadata.total_num_frames)
    )
    indices = vp.sample_frames(meta, fps=call.get("fps"))
    meta.frames_indices = indices
    out = vp(videos=[every[indices]], video_metadata=[meta], do_sample_frames=False, return_tensors="pt")
    return out, meta


@pytest.mark.parametrize("setting", [s[0] for s in SETTINGS])
def test_frames_and_pixels_equal_the_glm_processor(videos, setting):
    ours_fields, call = next((o, c) for n, o, c in SETTINGS if n == setting)
    vp = build_processor("glm4v").video_processor
    compared = 0
    for name, path in videos.items():
        ref, meta = _reference(path, call)
        params = GLM_FRAMES.params(**ours_fields)
        ours = sample_video(path, params)
        assert ours.meta["frame_indices"] == list(meta.frames_indices), name
        mine = vp(
            videos=[ours.frames],
            do_sample_frames=False,
            do_resize=False,
            return_tensors="pt",
        )
        assert mine["video_grid_thw"].tolist() == ref["video_grid_thw"].tolist(), name
        # same frames, same resize filter (torch's antialiased bicubic on uint8): the same pixels
        assert torch.equal(mine["pixel_values_videos"], ref["pixel_values_videos"]), name
        compared += 1
    assert compared == len(VIDEOS)


def test_rule_details_by_hand():
    glm = frame_rule("glm4v")
    p = GLM_FRAMES.params()
    assert p.rule == "glm4v" and p.to_dict()["fps"] == 2.0 and p.to_dict()["rule"] == "glm4v"
    # 3 s at 10 fps, 2 frames a second: ceil(i * 10 / 2) for i < 6
    assert glm.frame_indices(p, 30, 10.0)[0] == [0, 5, 10, 15, 20, 25]
    # 1.5 s: 3 frames, the odd count repeats the last
    assert glm.frame_indices(p, 15, 10.0)[0] == [0, 5, 10, 10]
    # a clip window shifts the picks to its start
    win = GLM_FRAMES.params(video_start=1.0, video_end=2.0)
    assert glm.frame_indices(win, 30, 10.0)[0] == [10, 15]
    # max_frames caps the count: that many evenly over the clip
    capped = GLM_FRAMES.params(max_frames=4)
    assert glm.frame_indices(capped, 100, 10.0)[0] == [0, 34, 67, 99]
    # nframes: evenly, as qwen-vl-utils (GLM's processor has no frame count)
    assert glm.frame_indices(GLM_FRAMES.params(nframes=4), 40, 10.0)[0] == [0, 13, 26, 39]
    # the budget is the whole video's: more frames, smaller frames
    assert glm.frame_size(p, 720, 1280, 4) == (728, 1288)
    small = GLM_FRAMES.params(total_pixels=64 * 28 * 28)
    # beta = sqrt(4 x 720 x 1280 / 50176) = 8.57: floor(720 / 8.57 / 28) = 3 rows of 28, floor(1280 / 8.57 / 28) = 5
    assert glm.frame_size(small, 720, 1280, 4) == (84, 140) and glm.frame_size(small, 720, 1280, 16) == (
        28,
        56,
    )
    # a per-frame cap on top of it
    assert glm.frame_size(GLM_FRAMES.params(max_pixels=28 * 28 * 4), 720, 1280, 8)[0] <= 56
    with pytest.raises(ValueError, match="video_min_frames is a qwen-vl-utils setting"):
        GLM_FRAMES.params(min_frames=4).to_dict()
    with pytest.raises(ValueError, match="unknown frame rule 'glm5'"):
        SamplingParams(factor=28, rule="glm5")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return make_tiny_model(str(tmp_path_factory.mktemp("glm4v")), "glm4v")


def test_prompt_timestamps_and_mixed_batches(tiny, videos, tmp_path):
    """The processor writes one timestamp per temporal patch from our metadata; a prompt with an
    image and a video runs a forward (transformers alone cannot: its masks mix the two)."""
    from PIL import Image

    Image.new("RGB", (60, 40), "red").save(tmp_path / "i.png")
    rows = [
        {"problem_id": "m", "problem": "<video><image>Which?", "answer": "A", "videos": [videos["fps_7"]],
         "images": ["i.png"]},
    ]  # fmt: skip
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = resolve_data(DataConfig(video_fps=1.0), tiny)
    ds = RecordDataset(load_records(str(tmp_path / "d.jsonl")), cfg, str(tmp_path / "d.jsonl"))
    model, processor = load_policy(tiny)
    inputs = encode_sample(processor, ds[0], cfg, ds.loader)
    text = processor.tokenizer.decode(inputs["input_ids"][0])
    # 9 s at 1 fps: frames 0, 7, ..., 56 (9 frames, the last repeated: 10), 5 patches at 0, 2, 4, 6, 8 s
    stamps = re.findall(r"<\|end_of_image\|>(\d+)", text)
    assert stamps == ["0", "2", "4", "6", "8"], text
    assert text.startswith("[gMASK]<sop><|user|>\n<|begin_of_video|>") and text.endswith("<|assistant|>\n")
    types = inputs["mm_token_type_ids"][0]
    assert (types == 2).sum() == inputs["video_grid_thw"].prod() // 4
    assert (types == 1).sum() == inputs["image_grid_thw"].prod() // 4
    with torch.no_grad():
        out = model(**inputs)
    assert torch.isfinite(out.logits).all()


def test_what_glm_cannot_do_is_refused_with_the_reason(tmp_path):
    from types import SimpleNamespace

    from transformers import AutoModelForImageTextToText

    from easyvideor1.rollout.engines import make_rollout_engine
    from easyvideor1.tools.config import ToolsConfig
    from easyvideor1.tools.session import ToolSession

    # GLM-4.1V's template has no tool-call format: an episode's tools would never be called
    with pytest.raises(
        ValueError,
        match="tools.names: glm4v cannot run tool episodes .GLM-4.1V's chat template has no tool-call format",
    ):
        ToolSession(ToolsConfig(names=["seek"]), "glm4v")
    # vLLM 0.32 does not take GLM-4.5V's pushed weights: training with it is refused up front
    model = AutoModelForImageTextToText.from_pretrained(make_tiny_model(str(tmp_path / "m"), "glm4v_moe"))
    cfg = SimpleNamespace(rollout=SimpleNamespace(engine="vllm"))
    with pytest.raises(
        ValueError, match="rollout.engine=vllm cannot train glm4v_moe: vLLM 0.32 does not take pushed"
    ):
        make_rollout_engine(cfg, None, model, None)


def test_cli_takes_any_family_spelling(tmp_path):
    import subprocess
    import sys

    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "easyvideor1",
            "make-tiny-model",
            "--family",
            "GLM-4.1V",
            "--out",
            str(tmp_path / "m"),
        ],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0 and get_family(
        json.loads((tmp_path / "m" / "config.json").read_text())["model_type"]
    ) is get_family("glm4v")
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "easyvideor1",
            "make-tiny-model",
            "--family",
            "llama",
            "--out",
            str(tmp_path / "x"),
        ],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "unknown model family 'llama'; known: glm4v, glm4v_moe" in bad.stderr


def test_glm_rule_settings_checked_when_the_model_names_the_family(tiny):
    with pytest.raises(ValueError, match="data.video_min_frames is a qwen-vl-utils setting"):
        resolve_data(DataConfig(video_min_frames=8), tiny)
    with pytest.raises(ValueError, match=r"data.video_total_pixels \(1000\) is below min_pixels \(12544\)"):
        resolve_data(DataConfig(video_total_pixels=1000), tiny)
    assert resolve_data(DataConfig(video_fps=1.0), tiny).sampling_params().to_dict()["rule"] == "glm4v"
