"""The one load -> render -> generate -> score pipeline: trainer validation, ``eval`` and ``filter``.

Stages: loaders read each sample's media (frame-cache entry or decode) in input order, at most
``queue_size`` samples ahead of the engine (back-pressure keeps memory flat on long videos) ->
the sample's prompt is rendered (:func:`render_prompt`) and submitted to the engine as one
:class:`~.base.Request` the moment it is ready (at most ``max_in_flight`` at once; batch engines
batch whatever has gathered) -> as each request finishes, the job scores it and the rows are
written (scored in ``score_workers`` threads when a judge scores, so its requests overlap). A
sample whose media cannot be loaded (a
:class:`~easyvideor1.media.failures.MediaFailure`, worded as training's ``skipped_records.jsonl``
words it), or whose request fails, becomes a failure row with its reason and the job goes on; any
other error while loading is a bug and stops the job.

What differs between the jobs is a :class:`Work`: which request a sample makes (``n``, sampling,
seed), how its responses become a row (a benchmark's scorer, the reward library), how a failure
is recorded. Resuming is the caller's: it passes only the indices still to do.

Loaders are processes (``load_workers`` >= 1; decoding holds the GIL long enough to stall
generation), forked so they inherit the dataset; ``load_workers=0`` loads in a thread instead, for
callers that must not fork (a trainer under torchrun, with CUDA and process groups live).
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, Protocol

from ..data.config import DataConfig
from ..data.dataset import MediaSample, RecordDataset, load_media, render_text, thinking_mode
from ..errors import ConfigError, UserError
from ..media.cache import VideoLoader
from ..media.failures import MediaFailure
from ..tools.session import ToolSession
from .base import Prompt, Request, Responses
from .config import PipelineSettings

Row = dict[str, Any]
_DONE = object()
# loader processes' niceness (CPU weight about 1/3 of the engine's at 5; Linux CFS)
LOADER_NICE = 5


class Work(Protocol):
    """One job's part of the pipeline, for sample ``i`` (an index into the dataset)."""

    def request(self, i: int, prompt: Prompt) -> Request: ...

    def scored(self, i: int, responses: Responses) -> Row: ...

    def failure(self, i: int, reason: str) -> Row: ...


@dataclass
class Timing:
    """Seconds spent loading media (summed over loaders) and generating (the stage's wall time)."""

    load: float = 0.0
    generate: float = 0.0


def render_prompt(
    processor, sample: MediaSample, cfg: DataConfig, loader: VideoLoader, tools: list[dict] | None = None
) -> Prompt:
    """The sample as every engine takes it: the chat-rendered text (thinking as ``data.thinking``
    or the template decides; the ``tools`` schemas where the template lists them) and its media,
    loaded unless a loader already did."""
    videos, images = sample.loaded or load_media(sample, cfg, loader)
    text = render_text(processor, sample, thinking=thinking_mode(cfg), tools=tools)
    return Prompt(text, list(videos), list(images))


def failure_reason(error: BaseException) -> str:
    """The one-line reason a failure row records."""
    return f"{type(error).__name__}: {error}"


def run_pipeline(
    dataset: RecordDataset,
    todo: list[int],
    engine,
    processor,
    work: Work,
    write: Callable[[list[Row]], None],
    settings: PipelineSettings | None = None,
    thumbnail: Callable[[list, list], str | None] | None = None,
    keep_thumbnail: Callable[[int, str], None] | None = None,
    tools: ToolSession | None = None,
) -> Timing:
    """Run ``todo`` (dataset indices, in order) through the stages; ``write`` gets rows as they finish
    (each call's rows sorted by index). ``thumbnail(videos, images)``, when given, runs in the loader
    on the frames just loaded; ``keep_thumbnail(i, strip)`` receives each as its sample arrives (so
    a killed run keeps those made so far). ``tools`` makes every request an episode whose calls
    the session answers (the engine must have ``runs_episodes``)."""
    settings = settings or PipelineSettings()
    if tools is not None and not engine.runs_episodes:
        raise ConfigError(
            f"tools.names={tools.settings.names}: the {type(engine).__name__} engine runs no episodes (use the hf engine)"
        )
    schemas = tools.schemas() if tools is not None else None
    timing = Timing()
    ready: queue.Queue = queue.Queue(maxsize=settings.queue_size)
    loader = threading.Thread(
        target=_produce, args=(dataset, todo, settings, ready, timing, thumbnail, keep_thumbnail), daemon=True
    )
    loader.start()
    pending: dict[Future, int] = {}
    # with a judge scoring, rows are scored in threads: its requests overlap one another
    scorers = ThreadPoolExecutor(settings.score_workers, "score") if settings.score_workers else None
    scoring: dict[Future, int] = {}
    finished = False
    t0 = None  # the generate stage starts with the first request: waiting for none is no generating
    while not finished or pending or scoring:
        while not finished and len(pending) < settings.max_in_flight:
            try:  # block only when nothing is running
                item = _next(ready, block=not pending and not scoring)
            except queue.Empty:
                break
            if item is _DONE:
                finished = True
                break
            i, sample, error = item
            if error is None:
                try:
                    prompt = render_prompt(processor, sample, dataset.cfg, dataset.loader, schemas)
                    request = work.request(i, prompt)
                    if tools is not None:  # each of its n responses an episode with its own budgets
                        request = replace(
                            request, episode_tools=partial(tools.episode, sample.record, list(sample.videos))
                        )
                    t0 = time.perf_counter() if t0 is None else t0
                    pending[engine.submit(request)] = i
                    continue
                except Exception as e:  # e.g. a template or processor that refuses this sample
                    error = failure_reason(e)
            write([work.failure(i, error)])
        if not pending and not scoring:
            continue
        done, _ = wait([*pending, *scoring], timeout=0.02, return_when=FIRST_COMPLETED)
        rows = []
        for future in done:
            if future in scoring:  # a row scored in a scoring thread
                scoring.pop(future)
                rows.append(future.result())
                continue
            i = pending.pop(future)
            try:
                out = future.result()
            except Exception as e:  # e.g. a prompt longer than the engine allows: recorded, the job goes on
                rows.append(work.failure(i, failure_reason(e)))
                continue
            if scorers is None:
                rows.append(work.scored(i, out))
            else:
                scoring[scorers.submit(work.scored, i, out)] = i
        if rows:
            write(sorted(rows, key=lambda r: r.get("index", 0)))
    timing.generate = 0.0 if t0 is None else time.perf_counter() - t0
    if scorers is not None:
        scorers.shutdown(wait=True)
    loader.join(timeout=5)
    return timing


def _next(ready: queue.Queue, block: bool = True):
    item = ready.get(block=block)
    # a user error (a record, a key, an output the loader side writes such as thumbnails): as it is
    if isinstance(item, UserError):
        raise item
    if isinstance(item, BaseException):  # the loader died: stop with its error, not a hang
        raise RuntimeError(f"media loading stopped: {failure_reason(item)}") from item
    return item


# the dataset and thumbnail function the forked loader processes inherit
_LOADER: tuple[RecordDataset, Callable | None] | None = None


def _produce(
    dataset, todo, settings: PipelineSettings, ready: queue.Queue, timing: Timing, thumbnail, keep
) -> None:
    """Loaded samples into ``ready`` in ``todo`` order, at most ``queue_size`` ahead of the engine."""
    global _LOADER
    try:
        if settings.load_workers == 0:
            for i in todo:
                _put(ready, _load_one(i, dataset, thumbnail), timing, keep)
        else:
            _LOADER = (dataset, thumbnail)  # inherited by the forked loaders
            ctx = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(settings.load_workers, mp_context=ctx, initializer=_loader_init) as pool:
                pending = iter(todo)
                window = collections.deque(
                    pool.submit(_load_forked, i) for i in _take(pending, settings.queue_size)
                )
                while window:
                    item = window.popleft().result()
                    window.extend(pool.submit(_load_forked, i) for i in _take(pending, 1))
                    _put(ready, item, timing, keep)
        ready.put(_DONE)
    except BaseException as e:  # never leave the engine side waiting for a queue nobody fills
        ready.put(e)


def _put(ready: queue.Queue, loaded, timing: Timing, keep) -> None:
    item, seconds, thumb = loaded
    timing.load += seconds
    if thumb and keep is not None:
        keep(item[0], thumb)
    ready.put(item)


def _take(it, k: int) -> list[int]:
    return [x for _, x in zip(range(k), it, strict=False)]


def _loader_init() -> None:
    from ..media.decode import set_decode_threads
    from ..media.workers import die_with_parent
    from ..threads import set_threads

    die_with_parent()  # a killed job must not leave its loaders behind (re-parented, holding memory)
    set_threads(1)  # one core per loader: the engine's choice reserved them (threads.apply)
    # the loaders are the parallelism (one process per free core, as preprocess's workers): FFmpeg's
    # own decode and scaler threads would oversubscribe the cores and take the engine's share
    set_decode_threads(1)
    # generation first: on cores the loaders share with the engine (2 loaders + 1 engine thread on 2
    # cores) an equal share slowed generation 1.35x (benchmarks/eval_pipeline.py); niced loaders get
    # every cycle the engine leaves, so nothing is lost when loading is the slower stage
    try:
        os.nice(LOADER_NICE)
    except OSError:  # not allowed here: equal shares, as before
        pass


def _load_forked(i: int):
    dataset, thumbnail = _LOADER
    return _load_one(i, dataset, thumbnail)


def _load_one(i: int, dataset: RecordDataset, thumbnail):
    """One sample with its media loaded (or, for a
    :class:`~easyvideor1.media.failures.MediaFailure`, its reason), the seconds it took, and its
    thumbnail when asked for."""
    t = time.perf_counter()
    sample = dataset[i]
    try:
        sample.loaded = load_media(sample, dataset.cfg, dataset.loader)
    except MediaFailure as e:  # recorded as this sample's failure; the job goes on
        return (i, None, e.reason), time.perf_counter() - t, None
    # anything else is a bug: it propagates and stops the job (_next), never a failure row
    thumb = None
    if thumbnail is not None:
        try:
            thumb = thumbnail(*sample.loaded)
        except Exception:  # a sample without a thumbnail is still evaluated
            thumb = None
    return (i, sample, None), time.perf_counter() - t, thumb
