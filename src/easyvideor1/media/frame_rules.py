"""The named frame rules: how a model's processor picks a video's frames and sizes them.

A model trained on one rule and evaluated on another sees different inputs, so each rule reproduces
its processor *exactly*. A rule answers three questions about a video's ``SamplingParams``
(``media/sampling.py``): which source frames (:meth:`FrameRule.frame_indices`), at what size
(:meth:`FrameRule.frame_size`), and which settings those are with the rule's defaults filled in
(:meth:`FrameRule.settings`: the frame cache's key and each video's metadata). ``SamplingParams.rule``
names the rule; a model family names its rule and its resize factor (``models/families``), so nothing
here knows a model.

- ``qwen``: qwen-vl-utils 0.0.14 (Qwen2/2.5/3-VL, Qwen3.5), with the same float arithmetic, Python's
  banker's rounding and float32 ``torch.linspace``; ``tests/media`` checks it against the real package.
- ``glm4v``: transformers' ``Glm4vVideoProcessor`` (GLM-4.1V, GLM-4.5V).
- ``internvl``: transformers' ``InternVLVideoProcessor`` (InternVL3.5).

Adding a rule: a :class:`FrameRule` subclass here, registered under its name in :data:`FRAME_RULES`
(the name is part of the cache key of the rule's frames, so it never changes).
"""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Any

from ..errors import ConfigError, UserError
from ..registry import Registry, UnknownNameError

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

# Glm4vVideoProcessor's defaults (transformers 5.19, and the released video_preprocessor_config)
GLM_FPS = 2.0
GLM_MAX_DURATION = 300
GLM_MIN_PIXELS = 112 * 112  # size.shortest_edge: the whole video's (t x h x w) lower bound
GLM_TOTAL_PIXELS = 28 * 28 * 2 * 30000  # size.longest_edge: the whole video's upper bound

# InternVL3.5's tile (image and frame) side: the frame size when no checkpoint says otherwise
INTERNVL_RELEASE_SIDE = 448


class UnknownFrameRuleError(UnknownNameError, ConfigError):
    """A frame rule name (``SamplingParams.rule``) that no rule answers to."""


FRAME_RULES: Registry[FrameRule] = Registry("frame rule", error=UnknownFrameRuleError)


def frame_rule(name: str) -> FrameRule:
    """The rule named ``name``; raises :class:`UnknownFrameRuleError` listing the known ones."""
    return FRAME_RULES.get(name)


def round_by_factor(number: float, factor: int) -> int:
    return round(number / factor) * factor


def ceil_by_factor(number: float, factor: int) -> int:
    return math.ceil(number / factor) * factor


def floor_by_factor(number: float, factor: int) -> int:
    return math.floor(number / factor) * factor


def check_frame_size(height: int, width: int) -> None:
    """Refuse a video whose frames are empty (the decoder reports it with the file)."""
    if min(height, width) <= 0:
        raise UserError(f"frame size must be positive, got {height}x{width}")


def check_frame_shape(height: int, width: int) -> None:
    """Refuse an empty frame or one whose aspect ratio no processor takes (qwen-vl-utils' and GLM's
    bound)."""
    check_frame_size(height, width)
    if max(height, width) / min(height, width) > MAX_RATIO:
        raise UserError(f"aspect ratio must be smaller than {MAX_RATIO}, got {height}x{width}")


def smart_resize(
    height: int, width: int, factor: int, min_pixels: float | None = None, max_pixels: float | None = None
) -> tuple[int, int]:
    """Height and width divisible by ``factor``, area within [min_pixels, max_pixels], aspect kept."""
    max_pixels = max_pixels if max_pixels is not None else IMAGE_MAX_TOKEN_NUM * factor**2
    min_pixels = min_pixels if min_pixels is not None else IMAGE_MIN_TOKEN_NUM * factor**2
    if max_pixels < min_pixels:
        raise ConfigError(f"max_pixels ({max_pixels}) must be >= min_pixels ({min_pixels})")
    check_frame_shape(height, width)
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


def frame_range(params, total_frames: int, video_fps: float) -> tuple[int, int, int]:
    """First and last source frame of the ``video_start``/``video_end`` window, and its length."""
    if video_fps <= 0:
        raise UserError(f"video fps must be positive, got {video_fps}")
    if total_frames <= 0:
        raise UserError(f"video has no frames (total_frames={total_frames})")
    start, end = params.video_start, params.video_end
    if start is None and end is None:
        return 0, total_frames - 1, total_frames
    duration = total_frames / video_fps
    first = math.ceil(max(0.0, min(start, duration)) * video_fps) if start is not None else 0
    last = total_frames - 1
    if end is not None:
        last = min(math.floor(max(0.0, min(end, duration)) * video_fps), total_frames - 1)
    if first >= last:
        raise UserError(
            f"clip window [{start}, {end}] s selects no frames of a {duration:.2f} s video "
            f"({total_frames} frames at {video_fps:.3f} fps)"
        )
    return first, last, last - first + 1


def smart_nframes(params, total_frames: int, video_fps: float) -> int:
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
        raise UserError(
            f"cannot sample {nframes} frames from a window of {total_frames} frames "
            f"(need {FRAME_FACTOR} <= nframes <= total frames)"
        )
    return nframes


def uniform_frame_indices(params, total_frames: int, video_fps: float) -> tuple[list[int], float]:
    """qwen-vl-utils' indices: ``smart_nframes`` frames evenly over the clip window."""
    first, last, window = frame_range(params, total_frames, video_fps)
    n = smart_nframes(params, window, video_fps)
    import torch  # here, not at the top: run configs import this module and must load no torch

    # float32 linspace + round-half-even, exactly as qwen-vl-utils does it
    idx = torch.linspace(first, last, n).round().long().tolist()
    return idx, n / max(window, 1e-6) * video_fps


class FrameRule:
    """One processor's way of picking and sizing a video's frames.

    Attributes:
        name: the rule's name (``SamplingParams.rule``, part of its cache keys).
        factors: the resize factors (patch size x merge size) the rule is defined for.
    """

    name: str = ""
    factors: tuple[int, ...] = ()

    def check(self, params) -> None:
        """Refuse settings the rule cannot follow, when the parameters are built."""

    def settings(self, params) -> dict[str, Any]:
        """``params`` as a dict with the rule's defaults filled in (cache keys and metadata)."""
        raise NotImplementedError

    def frame_indices(self, params, total_frames: int, video_fps: float) -> tuple[list[int], float]:
        """Source frame indices to decode for ``params`` and the resulting sample fps."""
        raise NotImplementedError

    def frame_size(self, params, height: int, width: int, nframes: int) -> tuple[int, int]:
        """Output (height, width) of every frame of a video sampled to ``nframes`` frames."""
        raise NotImplementedError


class QwenVLUtilsRule(FrameRule):
    """qwen-vl-utils 0.0.14: ``fps`` frames per second (even count, within ``min_frames`` /
    ``max_frames``) or ``nframes``, evenly over the clip; each frame resized, aspect kept, within
    ``[min_pixels, max_pixels]`` and its share of the video's ``total_pixels``.

    Its settings have no ``rule`` key: cache entries written before rules had names keep their keys.
    """

    name = "qwen"
    factors = (28, 32)  # qwen-vl-utils' image patch size 14 or 16, merged 2x2

    def check(self, params) -> None:
        min_pixels = (
            params.min_pixels if params.min_pixels is not None else VIDEO_MIN_TOKEN_NUM * params.factor**2
        )
        if params.max_pixels is not None and params.max_pixels < min_pixels:
            default = "" if params.min_pixels is not None else f", the default 128 x {params.factor}^2"
            raise ConfigError(f"max_pixels ({params.max_pixels}) is below min_pixels ({min_pixels}{default})")
        start, end = params.video_start, params.video_end
        if start is not None and end is not None and end <= start:
            raise ConfigError(f"video_end ({end}) must be after video_start ({start})")

    def settings(self, params) -> dict[str, Any]:
        d = asdict(params)
        del d["rule"]
        if d["nframes"] is None:
            d["fps"] = float(d["fps"] if d["fps"] is not None else DEFAULT_FPS)
            d["min_frames"] = d["min_frames"] if d["min_frames"] is not None else FPS_MIN_FRAMES
        if d["min_pixels"] is None:
            d["min_pixels"] = VIDEO_MIN_TOKEN_NUM * params.factor**2
        if d["total_pixels"] is None:
            d["total_pixels"] = MODEL_SEQ_LEN * params.factor**2 * 0.9
        return d

    def frame_indices(self, params, total_frames: int, video_fps: float) -> tuple[list[int], float]:
        return uniform_frame_indices(params, total_frames, video_fps)

    def max_pixels(self, params, nframes: int) -> float:
        """Per-frame pixel cap: the per-video total budget spread over the frames, within per-frame bounds."""
        d = self.settings(params)
        frame_max = VIDEO_MAX_TOKEN_NUM * params.factor**2
        cap = max(min(frame_max, d["total_pixels"] / nframes * FRAME_FACTOR), int(d["min_pixels"] * 1.05))
        return min(params.max_pixels, cap) if params.max_pixels is not None else cap

    def frame_size(self, params, height: int, width: int, nframes: int) -> tuple[int, int]:
        min_pixels = self.settings(params)["min_pixels"]
        return smart_resize(height, width, params.factor, min_pixels, self.max_pixels(params, nframes))


def glm_smart_resize(
    nframes: int, height: int, width: int, factor: int, min_pixels: float, max_pixels: float
) -> tuple[int, int]:
    """GLM-4.1V's resize: sides on the ``factor`` grid, the whole video's pixels (frames rounded
    to pairs x height x width) within ``[min_pixels, max_pixels]``, aspect kept."""
    check_frame_size(height, width)
    if height < factor or width < factor:  # GLM scales a too-small side up before rounding
        scale = max(factor / height, factor / width)
        height, width = int(height * scale), int(width * scale)
    check_frame_shape(height, width)
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    t_bar = round(nframes / 2) * 2
    if t_bar * h_bar * w_bar > max_pixels:
        beta = math.sqrt((nframes * height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif t_bar * h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (nframes * height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


class Glm4vRule(FrameRule):
    """transformers' ``Glm4vVideoProcessor``: ``fps`` frames per second (default 2) at
    ``ceil(i * source_fps / fps)``, at most ``max_duration`` (300) seconds' worth, else that many
    evenly over the video; repeated indices dropped; an odd count repeats the last frame. Frames are
    resized with the whole *video* (frames x height x width) between ``min_pixels`` (default
    112 x 112) and ``total_pixels`` (default 28 x 28 x 2 x 30000)."""

    name = "glm4v"
    factors = (28,)  # patch 14, merged 2x2

    def settings(self, params) -> dict[str, Any]:
        """The GLM rule's fields: ``fps`` (default 2) or ``nframes`` (evenly over the clip, as
        qwen-vl-utils: GLM's processor has no frame count), ``max_frames`` (default: 300 s worth),
        ``min_pixels`` / ``total_pixels`` bound the whole video (GLM's ``size``), ``max_pixels``
        (optional) caps each frame on top. ``min_frames`` is not a GLM setting and is refused."""
        d = asdict(params)
        if d["min_frames"] is not None:
            raise ConfigError(
                "data.video_min_frames is a qwen-vl-utils setting; GLM-4.1V's frame rule has none "
                "(it samples data.video_fps frames per second, at least 2): unset it"
            )
        if d["nframes"] is None:
            d["fps"] = float(d["fps"] if d["fps"] is not None else GLM_FPS)
        d["min_pixels"] = d["min_pixels"] if d["min_pixels"] is not None else GLM_MIN_PIXELS
        d["total_pixels"] = d["total_pixels"] if d["total_pixels"] is not None else GLM_TOTAL_PIXELS
        if d["total_pixels"] < d["min_pixels"]:
            raise ConfigError(
                f"total_pixels ({d['total_pixels']}) is below min_pixels ({d['min_pixels']}): GLM-4.1V "
                "bounds the whole video's pixels"
            )
        return d

    def frame_indices(self, params, total_frames: int, video_fps: float) -> tuple[list[int], float]:
        if params.nframes is not None:
            return uniform_frame_indices(params, total_frames, video_fps)
        first, last, window = frame_range(params, total_frames, video_fps)
        fps = self.settings(params)["fps"]
        duration = window / video_fps
        max_frames = params.max_frames if params.max_frames is not None else int(GLM_MAX_DURATION * fps)
        if duration * fps <= max_frames and duration <= GLM_MAX_DURATION:
            n = max(math.floor(duration * fps), 1)
            picks = [min(last, first + math.ceil(i * video_fps / fps)) for i in range(n)]
        elif max_frames >= window:
            picks = list(range(first, last + 1))
        else:  # longer than the processor takes: that many frames evenly over the clip
            import numpy as np

            seconds = np.linspace(0, duration, max_frames, endpoint=True)
            picks = [min(last, first + math.ceil(t * video_fps)) for t in seconds]
        indices = list(dict.fromkeys(picks))  # drop repeats, keep order
        if len(indices) % 2:
            indices.append(indices[-1])
        return indices, len(indices) / max(duration, 1e-6)

    def frame_size(self, params, height: int, width: int, nframes: int) -> tuple[int, int]:
        d = self.settings(params)
        budget = d["total_pixels"]
        if d["max_pixels"] is not None:  # a per-frame cap on top of GLM's per-video budget
            budget = min(budget, d["max_pixels"] * (round(nframes / 2) * 2))
        return glm_smart_resize(nframes, height, width, params.factor, d["min_pixels"], budget)


class InternVLRule(FrameRule):
    """transformers' ``InternVLVideoProcessor``: a fixed number of frames per video (``nframes``),
    one from the middle of each equal slice of the clip, each resized to one square tile."""

    name = "internvl"
    factors = (28,)  # patch 14, pixel shuffle 2

    @staticmethod
    def fixed_count(params) -> None:
        if params.nframes is None:
            raise ConfigError(
                "InternVL samples a fixed number of frames per video (its processor stacks every "
                "video of a batch): set data.video_nframes (and data.video_fps=null)"
            )

    def frame_side(self, params) -> int:
        """The square frame side: the largest multiple of the factor (patch x pixel-shuffle 2) whose
        square fits ``max_pixels`` (default the release's 448 x 448). It must equal the checkpoint's
        tile size (``vision_config.image_size``, the processor's ``size``); the InternVL family
        fills it in from there or refuses another."""
        factor = params.factor
        budget = params.max_pixels if params.max_pixels is not None else INTERNVL_RELEASE_SIDE**2
        side = (math.isqrt(int(budget)) // factor) * factor
        if side < factor:
            raise ConfigError(
                f"data.video_max_pixels ({params.max_pixels}) is below one {factor}x{factor} InternVL "
                f"tile: set it to the model's tile size squared (the release: {INTERNVL_RELEASE_SIDE}^2)"
            )
        return side

    def settings(self, params) -> dict[str, Any]:
        self.fixed_count(params)  # refused when the settings are read, not at the first video
        d = asdict(params)
        d["max_pixels"] = self.frame_side(params) ** 2  # what the frames are (cache keys)
        return d

    def frame_indices(self, params, total_frames: int, video_fps: float) -> tuple[list[int], float]:
        """``InternVLVideoProcessor.sample_frames`` (``initial_shift=True``) over the clip window:
        ``nframes`` frames, one per equal slice of the window, each from the middle of its slice
        (``int(shift + k * step)``, float32 arithmetic as the processor's ``torch.arange``)."""
        import torch

        self.fixed_count(params)
        first, _, window = frame_range(params, total_frames, video_fps)
        n = int(params.nframes)
        if n > window:
            raise UserError(f"cannot sample {n} frames from a window of {window} frames")
        step = window / n
        idx = torch.arange(step / 2, window, step).int().tolist()
        return [first + i for i in idx], len(idx) / window * video_fps

    def frame_size(self, params, height: int, width: int, nframes: int) -> tuple[int, int]:
        """Every frame becomes one square tile (the processor's ``size``), aspect not kept."""
        check_frame_size(height, width)
        side = self.frame_side(params)
        return side, side


for _rule in (QwenVLUtilsRule(), Glm4vRule(), InternVLRule()):
    FRAME_RULES.register(_rule.name, _rule)
