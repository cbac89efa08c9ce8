"""Differential test: the ``internvl`` frame rule equals transformers' InternVL video processor.

On videos made here, our sampler (``sample_video`` with the InternVL family's parameters: frame
indices from the family's rule, each frame resized to the square tile) and the processor itself
(``InternVLVideoProcessor.sample_frames`` on every decoded frame, then its own resize) give the
same frame indices and the same model pixels.
"""

from __future__ import annotations

from fractions import Fraction

import av
import numpy as np
import pytest
import torch
from transformers import InternVLVideoProcessor
from transformers.video_utils import VideoMetadata

from easyvideor1.media.decode import DecodeError
from easyvideor1.media.sampling import SamplingParams
from easyvideor1.media.video import sample_video
from tests.conftest import make_video

# (name, fps, duration s, (width, height), codec)
VIDEOS = [
    ("ntsc", Fraction(30000, 1001), 2.0, (64, 48), "h264"),
    ("pal_odd", 25, 1.56, (51, 37), "mpeg4"),
    ("portrait", 24, 1.0, (36, 64), "vp9"),
    ("short", 10, 0.9, (80, 60), "h264"),
    ("long_low_fps", 5, 12.0, (64, 36), "h264"),
]
NFRAMES = (1, 3, 4, 8)
SIDES = (56, 112)


def _all_frames(path: str) -> np.ndarray:
    """Every frame, decoded independently of our decoder (PyAV's own RGB conversion)."""
    with av.open(path) as c:
        return np.stack([f.to_ndarray(format="rgb24") for f in c.decode(video=0)])


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    d = tmp_path_factory.mktemp("internvl_videos")
    out = {}
    for name, fps, duration, size, codec in VIDEOS:
        path = make_video(d, name, fps=fps, duration=duration, size=size, codec=codec)
        out[name] = (path, _all_frames(path), float(Fraction(fps).limit_denominator(1001)))
    return out


@pytest.mark.parametrize("side", SIDES)
def test_frames_equal_the_internvl_video_processor(videos, side):
    processor = InternVLVideoProcessor(size={"height": side, "width": side})
    checked = 0
    for name, (path, frames, fps) in videos.items():
        meta = VideoMetadata(
            total_num_frames=len(frames), fps=fps, width=frames.shape[2], height=frames.shape[1]
        )
        for n in NFRAMES:
            if n > len(frames):
                continue
            ours = sample_video(
                path, SamplingParams(factor=28, rule="internvl", nframes=n, max_pixels=side * side)
            )
            want = processor.sample_frames(meta, num_frames=n).tolist()
            assert ours.meta["frame_indices"] == want, (name, n)
            assert tuple(ours.frames.shape) == (len(want), side, side, 3)
            # the processor's own pixels from every frame vs ours (already sampled and sized)
            theirs = processor(
                videos=[torch.from_numpy(frames)],
                video_metadata=[meta],
                do_sample_frames=True,
                num_frames=n,
                return_tensors="pt",
            )["pixel_values_videos"]
            mine = processor(
                videos=[ours.frames], do_sample_frames=False, do_resize=False, return_tensors="pt"
            )["pixel_values_videos"]
            assert theirs.shape == mine.shape
            assert torch.equal(theirs, mine), (name, n, float((theirs - mine).abs().max()))
            checked += 1
    assert checked >= 15


def test_the_internvl_rule_refuses_fps_sampling_and_small_budgets(videos):
    path = videos["ntsc"][0]
    with pytest.raises(DecodeError, match="data.video_nframes"):
        sample_video(path, SamplingParams(factor=28, rule="internvl", fps=2.0))
    with pytest.raises(DecodeError, match="data.video_max_pixels"):
        sample_video(path, SamplingParams(factor=28, rule="internvl", nframes=4, max_pixels=500))
    with pytest.raises(DecodeError, match="cannot sample 200 frames"):
        sample_video(path, SamplingParams(factor=28, rule="internvl", nframes=200, max_pixels=56 * 56))
