"""Video-dependence probes: the same prompt with its video content taken away or scrambled.

A probe answers "does the policy look at the video?". It changes the *content* of each video's
frames and nothing else: the frame count, frame size, frame indices, timestamps, and so the number
of vision tokens and the rendered prompt text, stay exactly as in the real run, so any change in
accuracy comes from what the frames show.

- ``blank``: every frame becomes uniform mid-grey (128, 128, 128). Mid-grey rather than black: the
  Qwen-VL processors normalise pixels with a mean near 0.5 (CLIP's mean for Qwen2-VL / Qwen2.5-VL,
  0.5 for Qwen3-VL), so mid-grey becomes an input of about zero, the least informative value,
  while black becomes an extreme (-1 to -1.8) the tower never saw in training. It also carries no
  motion (all frames equal).
- ``shuffle``: the frames are put in a random order (a fixed permutation per prompt and video,
  seeded by the record's ``problem_id``, so reruns and resumed evaluations see the same order; never
  the identity when there are two frames or more). Shows whether the order of events matters.

Only video frames are probed; images and text stay as they are (the probe measures the video's
contribution; a record's images are part of its question).

The probe is applied after frames are loaded (from the frame cache or decoded): it always builds
new tensors, so cached frames (memory-mapped copy-on-write) are reused and never written.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ConfigError

if TYPE_CHECKING:  # both are imported where frames are probed: run configs import PROBES from here
    from ..media.video import SampledVideo

PROBES = ("blank", "shuffle")
BLANK_VALUE = 128  # uint8 mid-grey: about zero after the processors' normalisation (see above)


def check_probe(key: str, probe: str | None) -> None:
    """Raise ``ConfigError`` naming ``key`` unless ``probe`` is None or one of :data:`PROBES`."""
    if probe is not None and probe not in PROBES:
        raise ConfigError(f"{key} must be one of {', '.join(PROBES)} (or unset), got {probe!r}")


def shuffle_order(n: int, seed_key: str) -> list[int]:
    """A permutation of ``range(n)`` fixed by ``seed_key``; not the identity when ``n >= 2``."""
    seed = int.from_bytes(hashlib.sha256(seed_key.encode()).digest()[:8], "little")
    order = np.random.default_rng(seed).permutation(n).tolist()
    if n >= 2 and order == list(range(n)):
        order = order[1:] + order[:1]  # a rotation: every frame moves
    return order


def probe_video(video: SampledVideo, probe: str | None, seed_key: str = "") -> SampledVideo:
    """``video`` with its frames blanked or shuffled (a new object; ``video`` is left untouched).

    ``probe=None`` returns ``video`` itself. ``seed_key`` fixes the ``shuffle`` order.
    """
    if probe is None:
        return video
    import torch

    check_probe("probe", probe)
    frames = video.frames
    if probe == "blank":
        new = torch.full_like(frames, BLANK_VALUE)
    else:
        new = frames[torch.tensor(shuffle_order(frames.shape[0], seed_key), dtype=torch.long)].clone()
    # the metadata (indices, fps, size) is kept: timestamps and token counts stay the real ones
    return dataclasses.replace(video, frames=new, meta={**video.meta, "probe": probe})


def probe_videos(videos: list[SampledVideo], probe: str | None, sample_key: str) -> list[SampledVideo]:
    """Every video of one sample probed; video ``k`` is shuffled with seed ``"<sample_key>#<k>"``."""
    if probe is None:
        return videos
    return [probe_video(v, probe, f"{sample_key}#{k}") for k, v in enumerate(videos)]
