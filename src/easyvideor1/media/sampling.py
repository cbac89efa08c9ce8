"""Frame-count, frame-index and resize rules, equal to qwen-vl-utils 0.0.14.

Qwen-VL models see a video as frames resized to a multiple of ``factor`` (patch size x spatial
merge: 28 for Qwen2/2.5-VL, 32 for Qwen3-VL and Qwen3.5), sampled at ``fps`` with an even frame count, and a
per-video pixel budget split over the frames. A model trained on one rule and evaluated on another
sees different inputs, so these functions reproduce qwen-vl-utils 0.0.14 *exactly* (the same float
arithmetic, Python's banker's rounding, float32 ``torch.linspace``); ``tests/media`` checks them
against the real package. The model family decides the factor (the reference hard-coded 32).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

# Constants of qwen-vl-utils 0.0.14 (vision_process.py).
FRAME_FACTOR = 2  # Qwen-VL merges frames in temporal pairs
DEFAULT_FPS = 2.0
FPS_MIN_FRAMES = 4
FPS_MAX_FRAMES = 768
SPATIAL_MERGE_SIZE = 2
VIDEO_MIN_TOKEN_NUM = 128
VIDEO_MAX_TOKEN_NUM = 768
IMAGE_MIN_TOKEN_NUM = 4
IMAGE_MAX_TOKEN_NUM = 16384
MODEL_SEQ_LEN = 128000  # qwen-vl-utils reads $MODEL_SEQ_LEN; we make the budget an explicit parameter
MAX_RATIO = 200


def factor_for_family(model_family: str) -> int:
    """Resize factor (patch size x spatial merge) of a model family (its adapter says): 28 or 32."""
    from ..models.families import get_family

    return get_family(model_family).factor


def family_factors() -> tuple[int, ...]:
    """The resize factors of every registered family (28 and 32 today)."""
    from ..models.families import family_names, get_family

    return tuple(sorted({get_family(name).factor for name in family_names()}))


def rule_family(rule: str):
    """The model family whose adapter implements frame rule ``rule`` (not ``"qwen"``)."""
    from ..models.families import family_names, get_family

    for name in family_names():
        family = get_family(name)
        if family.frame_rule == rule:
            return family
    rules = sorted({"qwen", *(get_family(n).frame_rule for n in family_names())})
    raise ValueError(f"unknown frame rule {rule!r} (known: {', '.join(rules)})")


def round_by_factor(number: float, factor: int) -> int:
    return round(number / factor) * factor


def ceil_by_factor(number: float, factor: int) -> int:
    return math.ceil(number / factor) * factor


def floor_by_factor(number: float, factor: int) -> int:
    return math.floor(number / factor) * factor


def smart_resize(
    height: int, width: int, factor: int, min_pixels: float | None = None, max_pixels: float | None = None
) -> tuple[int, int]:
    """Height and width divisible by ``factor``, area within [min_pixels, max_pixels], aspect kept."""
    max_pixels = max_pixels if max_pixels is not None else IMAGE_MAX_TOKEN_NUM * factor**2
    min_pixels = min_pixels if min_pixels is not None else IMAGE_MIN_TOKEN_NUM * factor**2
    if max_pixels < min_pixels:
        raise ValueError(f"max_pixels ({max_pixels}) must be >= min_pixels ({min_pixels})")
    if min(height, width) <= 0:
        raise ValueError(f"frame size must be positive, got {height}x{width}")
    if max(height, width) / min(height, width) > MAX_RATIO:
        raise ValueError(f"aspect ratio must be smaller than {MAX_RATIO}, got {height}x{width}")
    h_bar = max(factor, round_by_factor(height, factor))
    w_bar = max(factor, round_by_factor(width, factor))
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        # qwen-vl-utils can floor a side to 0 here and then crash in resize; keep one patch row
        h_bar = max(factor, floor_by_factor(height / beta, factor))
        w_bar = max(factor, floor_by_factor(width / beta, factor))
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = ceil_by_factor(height * beta, factor)
        w_bar = ceil_by_factor(width * beta, factor)
    return h_bar, w_bar


@dataclass(frozen=True)
class SamplingParams:
    """How one video is turned into model frames (the qwen-vl-utils ``ele`` keys).

    ``fps`` and ``nframes`` are mutually exclusive; ``None`` means the qwen-vl-utils default.
    ``factor`` is 28 (Qwen2/2.5-VL) or 32 (Qwen3-VL); build it with :meth:`for_family`.
    ``allow_truncated`` (not a qwen-vl-utils key) decides whether a file shorter than its container
    declares is sampled from its readable part (True) or refused (False, the default); it is part
    of the parameters so a cache entry built from the readable part is never served to a run that
    refuses truncated files.

    ``rule`` names how frames are picked and sized: ``"qwen"`` (the functions here) or a family's
    own rule (``glm4v``: GLM-4.1V's video processor), implemented by that family's adapter. Other
    rules read the same fields with their processor's meaning (the rule's docstring says which).
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
            raise ValueError("give either fps or nframes, not both")
        if self.rule != "qwen":
            rule_family(self.rule)  # an unknown rule is refused by name
        if not isinstance(self.allow_truncated, bool):
            raise ValueError(f"allow_truncated must be true or false, got {self.allow_truncated!r}")
        if self.factor not in family_factors():
            raise ValueError(
                f"factor must be one of {', '.join(map(str, family_factors()))} (a model family's "
                f"patch size x merge size), got {self.factor}"
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
                raise ValueError(f"{name} must be positive, got {value}")
        min_pixels = self.min_pixels if self.min_pixels is not None else VIDEO_MIN_TOKEN_NUM * self.factor**2
        if self.rule != "qwen":  # min_pixels may be per video there: the rule checks its own bounds
            return
        if self.max_pixels is not None and self.max_pixels < min_pixels:
            default = "" if self.min_pixels is not None else f", the default 128 x {self.factor}^2"
            raise ValueError(f"max_pixels ({self.max_pixels}) is below min_pixels ({min_pixels}{default})")
        if self.video_start is not None and self.video_end is not None and self.video_end <= self.video_start:
            raise ValueError(f"video_end ({self.video_end}) must be after video_start ({self.video_start})")

    @classmethod
    def for_family(cls, model_family: str, **kwargs: Any) -> SamplingParams:
        from ..models.families import get_family

        family = get_family(model_family)
        return cls(factor=family.factor, rule=family.frame_rule, **kwargs)

    def replace(self, **changes: Any) -> SamplingParams:
        return replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """Every parameter, with the defaults that do not depend on the video filled in.

        The qwen rule's dict has no ``rule`` key (cache entries built before rules existed keep
        their keys); another rule's dict is its family's, ``rule`` included."""
        if self.rule != "qwen":
            return rule_family(self.rule).sampling_defaults(self)
        d = asdict(self)
        del d["rule"]
        if d["nframes"] is None:
            d["fps"] = float(d["fps"] if d["fps"] is not None else DEFAULT_FPS)
            d["min_frames"] = d["min_frames"] if d["min_frames"] is not None else FPS_MIN_FRAMES
        d["min_pixels"] = (
            d["min_pixels"] if d["min_pixels"] is not None else VIDEO_MIN_TOKEN_NUM * self.factor**2
        )
        if d["total_pixels"] is None:
            d["total_pixels"] = MODEL_SEQ_LEN * self.factor**2 * 0.9
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SamplingParams:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})


def frame_range(params: SamplingParams, total_frames: int, video_fps: float) -> tuple[int, int, int]:
    """First and last source frame of the ``video_start``/``video_end`` window, and its length."""
    if video_fps <= 0:
        raise ValueError(f"video fps must be positive, got {video_fps}")
    if total_frames <= 0:
        raise ValueError(f"video has no frames (total_frames={total_frames})")
    start, end = params.video_start, params.video_end
    if start is None and end is None:
        return 0, total_frames - 1, total_frames
    duration = total_frames / video_fps
    first = math.ceil(max(0.0, min(start, duration)) * video_fps) if start is not None else 0
    last = total_frames - 1
    if end is not None:
        last = min(math.floor(max(0.0, min(end, duration)) * video_fps), total_frames - 1)
    if first >= last:
        raise ValueError(
            f"clip window [{start}, {end}] s selects no frames of a {duration:.2f} s video "
            f"({total_frames} frames at {video_fps:.3f} fps)"
        )
    return first, last, last - first + 1


def smart_nframes(params: SamplingParams, total_frames: int, video_fps: float) -> int:
    """Number of frames to sample from a window of ``total_frames`` frames (qwen-vl-utils rule)."""
    if params.nframes is not None:
        nframes = round_by_factor(params.nframes, FRAME_FACTOR)
    else:
        fps = params.fps if params.fps is not None else DEFAULT_FPS
        min_frames = ceil_by_factor(params.min_frames or FPS_MIN_FRAMES, FRAME_FACTOR)
        max_frames = params.max_frames if params.max_frames is not None else min(FPS_MAX_FRAMES, total_frames)
        max_frames = floor_by_factor(max_frames, FRAME_FACTOR)
        nframes = total_frames / video_fps * fps
        nframes = min(min(max(nframes, min_frames), max_frames), total_frames)
        nframes = floor_by_factor(nframes, FRAME_FACTOR)
    if not FRAME_FACTOR <= nframes <= total_frames:
        raise ValueError(
            f"cannot sample {nframes} frames from a window of {total_frames} frames "
            f"(need {FRAME_FACTOR} <= nframes <= total frames)"
        )
    return nframes


def frame_indices(params: SamplingParams, total_frames: int, video_fps: float) -> tuple[list[int], float]:
    """Source frame indices to decode, and the resulting sample fps (the params' rule decides)."""
    if params.rule != "qwen":
        return rule_family(params.rule).frame_indices(params, total_frames, video_fps)
    return uniform_frame_indices(params, total_frames, video_fps)


def uniform_frame_indices(
    params: SamplingParams, total_frames: int, video_fps: float
) -> tuple[list[int], float]:
    """qwen-vl-utils' indices: ``smart_nframes`` frames evenly over the clip window."""
    first, last, window = frame_range(params, total_frames, video_fps)
    n = smart_nframes(params, window, video_fps)
    import torch  # here, not at the top: run configs import this module and must load no torch

    # float32 linspace + round-half-even, exactly as qwen-vl-utils does it
    idx = torch.linspace(first, last, n).round().long().tolist()
    return idx, n / max(window, 1e-6) * video_fps


def video_max_pixels(params: SamplingParams, nframes: int) -> float:
    """Per-frame pixel cap: the per-video total budget spread over the frames, within per-frame bounds."""
    p = params.to_dict()
    frame_max = VIDEO_MAX_TOKEN_NUM * params.factor**2
    cap = max(min(frame_max, p["total_pixels"] / nframes * FRAME_FACTOR), int(p["min_pixels"] * 1.05))
    return min(params.max_pixels, cap) if params.max_pixels is not None else cap


def video_frame_size(params: SamplingParams, height: int, width: int, nframes: int) -> tuple[int, int]:
    """Output (height, width) of every frame of a video sampled to ``nframes`` frames."""
    if params.rule != "qwen":
        return rule_family(params.rule).frame_size(params, height, width, nframes)
    min_pixels = params.to_dict()["min_pixels"]
    return smart_resize(height, width, params.factor, min_pixels, video_max_pixels(params, nframes))


def image_size(
    height: int, width: int, factor: int, min_pixels: int | None = None, max_pixels: int | None = None
) -> tuple[int, int]:
    """Output size of an image under its own pixel budget (separate from videos')."""
    min_pixels = min_pixels if min_pixels is not None else IMAGE_MIN_TOKEN_NUM * factor**2
    max_pixels = max_pixels if max_pixels is not None else IMAGE_MAX_TOKEN_NUM * factor**2
    return smart_resize(height, width, factor, min_pixels, max_pixels)
