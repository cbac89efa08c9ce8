"""Records -> samples (file paths only) -> processor inputs.

A :class:`MediaSample` carries paths: the source videos, their cache entries and images. Data-loader
workers therefore pass small objects, never frame tensors. :func:`encode_sample` loads the frames
(memory-mapped from the cache, or decoded) and runs the Hugging Face processor with sampling and
resizing switched off and each video's real metadata passed along, so the processor neither
re-samples nor re-sizes, and Qwen3-VL's ``<t seconds>`` timestamps come from the source fps and
the true frame indices.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from torch.utils.data import Dataset

from ..errors import ConfigError
from ..media.cache import VideoLoader
from ..media.failures import MediaFailure, loading
from ..media.image import ImageBudget, load_image
from ..media.sampling import SamplingParams
from .config import DataConfig
from .preprocess import resolve_media_path
from .probe import check_probe, probe_videos
from .prompt import build_content, format_question, prompt_template
from .records import Record, RecordError, UnreadableRecord, load_records


@dataclass
class MediaSample:
    """One record, ready to load: every media item as a path (the reward library's scoring input
    is another class, ``rewards.Sample``)."""

    record: Record
    content: list[dict[str, Any]]
    videos: list[str] = field(default_factory=list)  # absolute source paths
    video_entries: list[str | None] = field(default_factory=list)  # cache entry per video, or None
    video_params: SamplingParams | None = None
    images: list[str] = field(default_factory=list)
    loaded: tuple[list, list] | None = None  # (videos, images) filled by load_media, e.g. in a loader thread
    probe: str | None = None  # blank/shuffle the video frames when loaded (``data/probe.py``)
    tools: list[dict] | None = None  # the tool schemas its prompt lists (``tools.*``: an episode)


class RecordDataset(Dataset):
    """Records of one data file as :class:`MediaSample` objects (paths only; cheap to pickle to workers).

    ``probe`` (``blank``/``shuffle``, ``data/probe.py``) is given to every sample: its video frames
    are then blanked or shuffled when loaded (evaluation with ``eval.probe``)."""

    def __init__(
        self,
        records: list[Record],
        cfg: DataConfig,
        data_file: str | list[str],
        loader: VideoLoader | None = None,
        probe: str | None = None,
    ):
        check_probe("probe", probe)
        self.probe = probe
        self.tools: list[dict] | None = None  # tool schemas every sample's prompt lists (episodes)
        # one data file for all records, or one per record (relative media paths resolve against it)
        self.records, self.cfg = records, cfg
        self.data_files = [data_file] * len(records) if isinstance(data_file, str) else list(data_file)
        if len(self.data_files) != len(records):
            raise ValueError("need one data file per record")
        self.loader = loader or VideoLoader(cfg.cache_dir, cfg.cache_mode, cfg.decode_time_limit)
        # (data file, error) of the files' records whose text could not be read: in no sample,
        # listed by training beside the records whose media cannot be loaded
        self.unreadable: list[tuple[str, RecordError]] = []

    @classmethod
    def from_files(
        cls, files: list[str], cfg: DataConfig, loader: VideoLoader | None = None
    ) -> RecordDataset:
        """The records of ``files``; a record whose text cannot be read (``UnreadableRecord``) is
        left out into ``unreadable``, any other bad record raises."""
        records, owners, unreadable = [], [], []
        for f in files:
            errors: list[RecordError] = []
            recs = load_records(f, errors, UnreadableRecord)
            records += recs
            owners += [f] * len(recs)
            unreadable += [(f, e) for e in errors]
        dataset = cls(records, cfg, owners, loader)
        dataset.unreadable = unreadable
        return dataset

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, i: int) -> MediaSample:
        rec = self.records[i]
        params = self.cfg.sampling_params(rec) if rec.videos else None
        data_file = self.data_files[i]
        videos = [resolve_media_path(v, data_file, self.cfg.video_root) for v in rec.videos]
        entries = []
        for v in videos:
            try:
                entry = self.loader.locate(v, params) if os.path.exists(v) or self.cfg.cache_dir else None
            except (OSError, MediaFailure):  # unreadable or not a file: loading it names the error
                entry = None
            entries.append(str(entry) if entry else None)
        return MediaSample(
            record=rec,
            content=build_content(rec, format_question(rec, self.cfg.prompt_template)),
            videos=videos,
            video_entries=entries,
            video_params=params,
            images=[resolve_media_path(p, data_file, self.cfg.video_root) for p in rec.images],
            probe=self.probe,
            tools=self.tools,
        )


def image_budget(cfg: DataConfig) -> ImageBudget | None:
    """The size records' images are loaded at: the factor grid within the *image* pixel budget, or
    None (as they are) for a family whose processor sizes images itself (InternVL's tiles)."""
    if cfg.model_family is not None and not _family(cfg.model_family).vision.resize_images:
        return None
    return ImageBudget(cfg.factor, cfg.image_min_pixels, cfg.image_max_pixels)


def media_names(sample: MediaSample) -> tuple[list[str], list[str]]:
    """The sample's videos and images as its record names them (failures quote these, so one file
    reads the same whatever ``data.video_root`` or command resolved it against)."""
    rec = sample.record
    videos = list(rec.videos) if len(rec.videos) == len(sample.videos) else list(sample.videos)
    images = list(rec.images) if len(rec.images) == len(sample.images) else list(sample.images)
    return videos, images


def load_media(sample: MediaSample, cfg: DataConfig, loader: VideoLoader) -> tuple[list, list]:
    """The sample's videos (cache entries or decoded) and images, ready for the processor.

    A file that cannot be used raises :class:`~easyvideor1.media.failures.MediaFailure` (its text
    ``<name as in the record>: <cause>``); any other error propagates as it is.

    A sample's ``probe`` blanks or shuffles its video frames here, after the cache: the one place
    the probe is applied, for training validation and evaluation alike (images are left as they are).
    """
    video_names, image_names = media_names(sample)
    videos = []
    for name, v, e in zip(video_names, sample.videos, sample.video_entries, strict=True):
        with loading(name, v):
            videos.append(loader.load(v, sample.video_params, entry=e))
    if sample.probe:  # shuffles are seeded by the record and file names: the same on every machine
        names = ",".join(os.path.basename(v) for v in sample.videos)
        videos = probe_videos(videos, sample.probe, f"{sample.record.problem_id}:{names}")
    for video in videos:
        video.timestamps = cfg.timestamps  # how processor_metadata reports frame times (data.timestamps)
    images = []
    for name, p in zip(image_names, sample.images, strict=True):
        with loading(name, p):
            images.append(load_image(p, image_budget(cfg)))
    return videos, images


def render_text(
    processor,
    sample: MediaSample,
    add_generation_prompt: bool = True,
    thinking: bool | None = None,
    tools: list[dict] | None = None,
) -> str:
    """The sample's user turn rendered by the chat template (vision placeholders unexpanded).

    ``thinking`` becomes the template's ``enable_thinking`` where the template reads it (Qwen3.5's;
    Qwen-VL templates have no such switch); ``None`` leaves the template's own default. ``tools``
    (function schemas, ``tools.*``) go where the template puts them (Qwen: the system turn).
    """
    messages = [{"role": "user", "content": sample.content}]
    # only templates that read enable_thinking get it (the processor passes unknown keys on to
    # its own call, with a warning)
    takes_it = "enable_thinking" in str(getattr(processor, "chat_template", "") or "")
    extra = {"enable_thinking": thinking} if thinking is not None and takes_it else {}
    tools = tools if tools is not None else sample.tools
    if tools:
        extra["tools"] = tools
    return processor.apply_chat_template(
        messages, add_generation_prompt=add_generation_prompt, tokenize=False, **extra
    )


def thinking_mode(cfg: DataConfig) -> bool | None:
    """``enable_thinking`` for a thinking-template model: ``data.thinking`` when set, else on for the
    ``reasoning`` prompt, off for ``plain`` (an answer-only prompt), the template's default for
    ``none`` and ``.jinja`` prompts."""
    return prompt_template(cfg.prompt_template).thinking("direct", cfg.thinking)


def raw_media(videos: list, images: list) -> dict[str, list]:
    """Media as engines with their own processor take them (vLLM's ``multi_modal_data``).

    Frames are uint8 ``[T, H, W, 3]`` numpy views of the loaded frames (no copy); the metadata
    says they are already sampled (``do_sample_frames=False``) and carries the source fps and
    frame indices, so the engine's processor renders the same ``<t seconds>`` timestamps.
    """
    return {
        "video": [(v.frames.numpy(), {**v.processor_metadata(), "do_sample_frames": False}) for v in videos],
        "image": list(images),
    }


def prompt_parts(
    processor, sample: MediaSample, cfg: DataConfig, loader: VideoLoader
) -> tuple[str, dict[str, list]]:
    """One prompt's text and :func:`raw_media`, without running the processor (vLLM evaluation)."""
    videos, images = sample.loaded or load_media(sample, cfg, loader)
    return render_text(processor, sample, thinking=thinking_mode(cfg)), raw_media(videos, images)


def _render(processor, samples, cfg, loader, add_generation_prompt, responses):
    texts, loaded = [], []
    for i, sample in enumerate(samples):
        text = render_text(processor, sample, add_generation_prompt, thinking_mode(cfg))
        texts.append(text + (responses[i] if responses else ""))
        loaded.append(sample.loaded or load_media(sample, cfg, loader))
    return texts, loaded


def _process(
    processor, texts: list[str], loaded: list[tuple[list, list]], padding_side: str, model_family: str | None
):
    from transformers.video_utils import VideoMetadata

    from ..models.families import get_family

    videos, metadata, images = [], [], []
    for sample_videos, sample_images in loaded:
        for video in sample_videos:
            videos.append(video.frames)
            metadata.append(VideoMetadata(**video.processor_metadata()))
        images.extend(sample_images)
    kwargs: dict[str, Any] = {}
    if videos:
        kwargs.update(videos=videos, video_metadata=metadata, do_sample_frames=False)
        # the family's explicit per-frame pixel cap (the one our sampler applied), never a default
        kwargs.update(get_family(model_family or _unknown_family()).vision.video_processor_kwargs())
    if images:
        kwargs["images"] = images
    # our frames and images are already on the factor grid within their budgets
    return processor(
        text=texts, do_resize=False, return_tensors="pt", padding=True, padding_side=padding_side, **kwargs
    )


def _family(name: str):
    from ..models.families import get_family

    return get_family(name)


def _unknown_family() -> str:
    raise ConfigError("data.model_family is not known: give a model (model.path) or data.model_family")


def encode_batch(
    processor,
    samples: list[MediaSample],
    cfg: DataConfig,
    loader: VideoLoader,
    add_generation_prompt: bool = True,
    padding_side: str = "left",
    responses: list[str] | None = None,
):
    """Processor inputs for several samples at once (left-padded prompts, ready for ``generate``)."""
    texts, loaded = _render(processor, samples, cfg, loader, add_generation_prompt, responses)
    return _process(processor, texts, loaded, padding_side, cfg.model_family)


def encode_prompts(processor, samples: list[MediaSample], cfg: DataConfig, loader: VideoLoader):
    """A :class:`~easyvideor1.models.inputs.PromptBatch` (left-padded, generation prompt added).

    It also keeps each prompt's text and raw media (``texts``, ``media``) for engines that run
    their own processor; the frames are views of the loaded ones, so this costs no copy.
    """
    texts, loaded = _render(processor, samples, cfg, loader, True, None)
    return encode_loaded(processor, texts, loaded, cfg.model_family)


def encode_loaded(processor, texts: list[str], loaded: list[tuple[list, list]], model_family: str | None):
    """A left-padded :class:`~easyvideor1.models.inputs.PromptBatch` of rendered prompt texts and
    their loaded ``(videos, images)`` (what the engines' request path encodes)."""
    from ..models.inputs import PromptBatch

    inputs = dict(_process(processor, texts, loaded, "left", model_family))
    return PromptBatch(
        inputs,
        [len(v) for v, _ in loaded],
        [len(im) for _, im in loaded],
        texts=texts,
        media=[raw_media(v, im) for v, im in loaded],
        # grid-less families (InternVL): each prompt's rows of the vision tensors
        pixel_rows=None
        if model_family is None
        else _family(model_family).vision.pixel_rows(processor, inputs),
    )


def encode_sample(
    processor, sample: MediaSample, cfg: DataConfig, loader: VideoLoader, add_generation_prompt=True
):
    """Processor inputs (``input_ids``, ``pixel_values_videos``, ``video_grid_thw``, ...) for one sample."""
    return encode_batch(processor, [sample], cfg, loader, add_generation_prompt)
