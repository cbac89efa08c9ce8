"""Configuration of the data path: where records and videos are, and how frames are sampled."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import ConfigError
from ..media.cache import CACHE_MODES
from ..media.sampling import DEFAULT_FPS, SamplingParams
from ..media.video import TIMESTAMP_MODES
from ..models.families import factor_for_family, family_factors


@dataclass
class DataConfig:
    """Data files, media budgets and the frame cache (the ``data`` section of a run config).

    Parameters:
        train_files: Training data files (JSON array, JSONL or Parquet), read in order.
        val_files: Validation / evaluation data files.
        video_root: Directory that relative ``videos``/``images`` paths are joined to. Default: the
            directory of the data file that holds the record.
        model_family: Optional. The family comes from the model (``config.json`` ``model_type``:
            ``qwen2_vl``, ``qwen2_5_vl``, ``qwen3_vl``, ``qwen3_vl_moe``, ``qwen3_5``, ``qwen3_5_moe``,
            ``glm4v``, ``glm4v_moe``; other spellings such as ``qwen3vl`` or ``GLM-4.1V`` are
            accepted). Set, it is a check: a model of another family is an error. Without a model
            (``preprocess`` without ``--model``) it is how the family is named. It decides the resize
            factor (28 for patch-14 families: Qwen2/2.5-VL, GLM; 32 for patch-16 ones: Qwen3-VL,
            Qwen3.5) and the frame rule: qwen-vl-utils' for Qwen families, the family's own
            processor's for GLM (whose ``video_*`` meanings differ where noted below).
        video_fps: Frames sampled per second of video (qwen-vl-utils ``fps``; default 2.0 when
            ``video_nframes`` is not set). A record's own ``fps`` field overrides it.
        video_nframes: A fixed frame count instead of ``video_fps`` (mutually exclusive with it:
            setting both is an error, since one of them would be silently ignored).
        video_min_frames: Lower bound on the frame count with ``video_fps`` (default 4; GLM: not a
            setting of its rule, refused).
        video_max_frames: Upper bound on the frame count (default: min(768, frames in the video)).
            A record's ``max_frames`` overrides it.
        video_min_pixels: Lower bound on pixels per frame (default 128 x factor^2; GLM: on the whole
            video's frames x height x width, default 112 x 112).
        video_max_pixels: Upper bound on pixels per frame (default 768 x factor^2, further limited by
            ``video_total_pixels``).
        video_total_pixels: Pixel budget of a whole video, spread over its frames
            (default 128000 x factor^2 x 0.9, as qwen-vl-utils; GLM: 28 x 28 x 2 x 30000).
        image_min_pixels: Lower bound on pixels of an image (separate from videos'; default 4 x factor^2).
        image_max_pixels: Upper bound on pixels of an image (default 16384 x factor^2).
        cache_dir: Offline frame cache built by ``easyvideor1 preprocess``.
        cache_mode: ``prefer_cache`` (decode on a miss and count it), ``cache_only`` (a miss is an
            error) or ``decode_only`` (ignore the cache).
        decode_time_limit: Seconds one video may take to decode before it is reported as failed.
        max_prompt_length: Prompts longer than this (in tokens, after media expansion) are dropped
            and counted instead of failing mid-run.
        preflight: ``full`` encodes every training prompt at start-up (exact lengths, overlong
            prompts dropped before step 1, token balancing across ranks possible); ``fast`` checks
            records, reward tasks and cache entries only and drops an overlong prompt when its step
            encodes it (``data/dropped_overlong``): for datasets too large to encode up front.
        prompt_template: How a question becomes the model's text (``data/prompt.py``): ``none``
            (as written), ``plain`` (options block + answer-format instruction), ``reasoning`` (plus
            a <think> request), ``benchmark`` (eval's generic prompt), or a ``.jinja`` file rendered
            with the record's fields. ``eval --data`` with this config renders the same text.
        thinking: ``enable_thinking`` for chat templates that read it (Qwen3.5): None derives it
            from ``prompt_template`` (off for ``plain``, on for ``reasoning``, the template's own
            default otherwise); ``eval`` sets it from its style (``direct`` off, ``thinking`` on).
        strict: A record whose media cannot be loaded (missing, corrupt or undecodable video or
            image, or no cache entry in ``cache_only`` mode), or whose text cannot be read (a line
            that is not UTF-8 or not JSON, nesting too deep, a lone surrogate escape such as
            ``"\\ud800"``), stops training with its error. By
            default (false) such a record is skipped, listed with the reason in
            ``<trainer.output_dir>/skipped_records.jsonl`` and counted (``data/skipped_records``).
        timestamps: What Qwen3-VL's ``<t seconds>`` text says for each frame: ``index`` (frame
            index / average fps, as qwen-vl-utils; exact for constant-frame-rate video) or ``pts``
            (the frame's real presentation time, seconds from the first shown frame: right on
            variable-frame-rate video). Qwen2/2.5-VL use one rate per video either way.
        allow_truncated: A video file shorter than its container declares (a cut download) is a
            failure by default; true samples its readable part instead (see ``media/truncation.py``).
        prefetch: Training loads the next draw's media (cache reads or decoding) and runs the
            processor on them in a background thread while the current step trains
            (``trainer/prefetch.py``), so a step does not wait for its own media. The prompts,
            their order and every result are the same either way; false loads them when drawn.
            Only ``rollout.mode=sync`` prefetches: the other modes draw ahead already.
    """

    train_files: list[str] = field(default_factory=list)
    val_files: list[str] = field(default_factory=list)
    video_root: str | None = None
    model_family: str | None = None
    video_fps: float | None = None  # None: DEFAULT_FPS, unless video_nframes is set
    video_nframes: int | None = None
    video_min_frames: int | None = None
    video_max_frames: int | None = None
    video_min_pixels: int | None = None
    video_max_pixels: int | None = None
    video_total_pixels: int | None = None
    image_min_pixels: int | None = None
    image_max_pixels: int | None = None
    cache_dir: str | None = None
    cache_mode: str = "prefer_cache"
    decode_time_limit: float = 300.0
    prompt_template: str = "plain"
    thinking: bool | None = None
    max_prompt_length: int = 4096
    preflight: str = "full"
    strict: bool = False
    timestamps: str = "index"
    allow_truncated: bool = False
    prefetch: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.prefetch, bool):
            raise ConfigError(f"data.prefetch must be true or false, got {self.prefetch!r}")
        if self.timestamps not in TIMESTAMP_MODES:
            raise ConfigError(
                f"data.timestamps must be one of {', '.join(TIMESTAMP_MODES)}, got {self.timestamps!r}"
            )
        if not isinstance(self.allow_truncated, bool):
            raise ConfigError(f"data.allow_truncated must be true or false, got {self.allow_truncated!r}")
        if self.preflight not in ("full", "fast"):
            raise ConfigError(f"data.preflight must be full or fast, got {self.preflight!r}")
        if self.video_fps is not None and self.video_nframes is not None:
            raise ConfigError(
                f"data.video_fps ({self.video_fps}) and data.video_nframes ({self.video_nframes}) are "
                "exclusive (a frame rate or a fixed frame count): set one of them to null"
            )
        if self.video_nframes is None and self.video_fps is None:
            self.video_fps = DEFAULT_FPS  # resolved here, so the saved config says which rule ran
        self._check_ranges()
        if self.model_family is not None:
            factor_for_family(self.model_family)  # raises a clear error for unknown families
        if self.cache_mode not in CACHE_MODES:
            raise ConfigError(
                f"data.cache_mode must be one of {', '.join(CACHE_MODES)}, got {self.cache_mode!r}"
            )
        # validate the budgets now, not at the first video: with the family's factor, or, before the
        # model names the family, with the smallest one (the check is repeated when resolve.py names it)
        self._check_budgets(self.factor if self.model_family is not None else min(family_factors()))

    def _check_budgets(self, factor: int) -> None:
        try:
            self._sampling_params(factor).to_dict()  # to_dict: a family's frame rule checks its keys
        except ValueError as e:  # name the setting: "fps must be positive" -> data.video_fps
            raise ConfigError(f"data.video_{e}" if str(e).split()[0].isidentifier() else str(e)) from None
        image_min = self.image_min_pixels if self.image_min_pixels is not None else 4 * factor**2
        if self.image_max_pixels is not None and self.image_max_pixels < image_min:
            raise ConfigError(
                f"data.image_max_pixels ({self.image_max_pixels}) is below data.image_min_pixels "
                f"({image_min}{'' if self.image_min_pixels is not None else ', the default 4 x factor^2'})"
            )

    def _check_ranges(self) -> None:
        """Numbers that would only fail (or do nothing) at the first video, checked at load."""
        from ..validation import positive, require

        positive("data.decode_time_limit", self.decode_time_limit)
        from .prompt import TEMPLATE_NAMES, PromptError, prompt_template

        require(
            self.prompt_template in TEMPLATE_NAMES or str(self.prompt_template).endswith(".jinja"),
            "data.prompt_template",
            f"must be {', '.join(TEMPLATE_NAMES)} or a .jinja file",
            self.prompt_template,
        )
        try:  # a .jinja file is read and compiled now: its syntax errors stop the run at start-up
            prompt_template(self.prompt_template)
        except PromptError as e:
            raise ConfigError(f"data.prompt_template: {e}") from None
        require(
            isinstance(self.max_prompt_length, int) and self.max_prompt_length >= 1,
            "data.max_prompt_length",
            "must be >= 1",
            self.max_prompt_length,
        )
        for key in (
            "video_fps",
            "video_nframes",
            "video_min_frames",
            "video_max_frames",
            "video_min_pixels",
            "video_max_pixels",
            "video_total_pixels",
            "image_min_pixels",
            "image_max_pixels",
        ):
            if getattr(self, key) is not None:
                positive(f"data.{key}", getattr(self, key))
        lo, hi = self.video_min_frames, self.video_max_frames
        require(
            lo is None or hi is None or lo <= hi,
            "data.video_min_frames",
            f"must be <= data.video_max_frames ({hi})",
            lo,
        )

    @property
    def factor(self) -> int:
        if self.model_family is None:
            raise ConfigError(
                "the model family is not known, so neither is the frame resize factor: give a model "
                "(model.path, or --model PATH for preprocess) or name the family (data.model_family, "
                "--model-family)"
            )
        return factor_for_family(self.model_family)

    def sampling_params(self, record=None) -> SamplingParams:
        """The sampling parameters for one record's videos (record overrides applied)."""
        return self._sampling_params(self.factor, record)

    def _sampling_params(self, factor: int, record=None) -> SamplingParams:
        fps, nframes, max_frames = self.video_fps, self.video_nframes, self.video_max_frames
        start = end = None
        if record is not None:
            if record.fps is not None:
                fps, nframes = record.fps, None
            if record.max_frames is not None:
                max_frames = record.max_frames
            start, end = record.video_start, record.video_end
        return SamplingParams(
            factor=factor,
            fps=fps,
            nframes=nframes,
            min_frames=self.video_min_frames,
            max_frames=max_frames,
            min_pixels=self.video_min_pixels,
            max_pixels=self.video_max_pixels,
            total_pixels=self.video_total_pixels,
            video_start=start,
            video_end=end,
            allow_truncated=self.allow_truncated,
            rule=self._frame_rule(),
        )

    def _frame_rule(self) -> str:
        """The family's frame rule (qwen-vl-utils' until the model names the family)."""
        if self.model_family is None:
            return "qwen"
        from ..models.families import get_family

        return get_family(self.model_family).frames.rule
