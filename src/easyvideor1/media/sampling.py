"""How one video becomes model frames: its sampling parameters and the frame rule they name.

Models see a video as frames picked from a clip window and resized to a multiple of ``factor`` (patch
size x spatial merge: 28 for Qwen2/2.5-VL, GLM and InternVL, 32 for Qwen3-VL and Qwen3.5) under a
pixel budget. :class:`SamplingParams` holds one video's settings (the qwen-vl-utils ``ele`` keys);
its ``rule`` names how frames are picked and sized, one of the rules of ``media/frame_rules.py``
(qwen-vl-utils 0.0.14 unless a model's processor does otherwise). The model family decides the
factor and the rule (``models/families``: ``family.frames.params(...)``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from ..errors import ConfigError
from .frame_rules import (
    DEFAULT_FPS,
    FRAME_FACTOR,
    frame_range,
    frame_rule,
    smart_resize,
)

# what callers of this module read beside the parameters (the rule's constants and clip window)
__all__ = [
    "DEFAULT_FPS",
    "FRAME_FACTOR",
    "SamplingParams",
    "frame_indices",
    "frame_range",
    "image_size",
    "video_frame_size",
]


@dataclass(frozen=True)
class SamplingParams:
    """How one video is turned into model frames (the qwen-vl-utils ``ele`` keys).

    ``fps`` and ``nframes`` are mutually exclusive; ``None`` means the rule's default. ``factor``
    (patch size x merge size) and ``rule`` are the model family's: build the parameters with its
    ``family.frames.params(...)``.
    ``allow_truncated`` (not a qwen-vl-utils key) decides whether a file shorter than its container
    declares is sampled from its readable part (True) or refused (False, the default); it is part
    of the parameters so a cache entry built from the readable part is never served to a run that
    refuses truncated files.

    ``rule`` names how frames are picked and sized (``media/frame_rules.py``): ``"qwen"``
    (qwen-vl-utils) or a processor's own rule (``glm4v``, ``internvl``), which reads the same fields
    with its processor's meaning (the rule's docstring says which).
    """

    factor: int = 32
    fps: float | None = None
    nframes: int | None = None
    min_frames: int | None = None
    max_frames: int | None = None
    min_pixels: int | None = None
    max_pixels: int | None = None
    total_pixels: int | None = None
    video_start: float | None = None
    video_end: float | None = None
    allow_truncated: bool = False
    rule: str = "qwen"

    def __post_init__(self) -> None:
        if self.fps is not None and self.nframes is not None:
            raise ConfigError("give either fps or nframes, not both")
        rule = frame_rule(self.rule)  # an unknown rule is refused by name
        if not isinstance(self.allow_truncated, bool):
            raise ConfigError(f"allow_truncated must be true or false, got {self.allow_truncated!r}")
        if self.factor not in rule.factors:
            raise ConfigError(
                f"factor must be one of {', '.join(map(str, rule.factors))} for the {rule.name} frame "
                f"rule (a model family's patch size x merge size), got {self.factor}"
            )
        for name in (
            "fps",
            "nframes",
            "min_frames",
            "max_frames",
            "min_pixels",
            "max_pixels",
            "total_pixels",
        ):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigError(f"{name} must be positive, got {value}")
        rule.check(self)

    def replace(self, **changes: Any) -> SamplingParams:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Every parameter, with the rule's defaults that do not depend on the video filled in
        (the frame cache's key: the qwen rule's dict has no ``rule`` key, another rule's has)."""
        return frame_rule(self.rule).settings(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SamplingParams:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def frame_indices(params: SamplingParams, total_frames: int, video_fps: float) -> tuple[list[int], float]:
    """Source frame indices to decode, and the resulting sample fps (the params' rule decides)."""
    return frame_rule(params.rule).frame_indices(params, total_frames, video_fps)


def video_frame_size(params: SamplingParams, height: int, width: int, nframes: int) -> tuple[int, int]:
    """Output (height, width) of every frame of a video sampled to ``nframes`` frames."""
    return frame_rule(params.rule).frame_size(params, height, width, nframes)


def image_size(
    height: int, width: int, factor: int, min_pixels: int | None = None, max_pixels: int | None = None
) -> tuple[int, int]:
    """Output size of an image under its own pixel budget (separate from videos'; qwen-vl-utils'
    image defaults when unset)."""
    return smart_resize(height, width, factor, min_pixels, max_pixels)
