"""``easyvideor1 filter``: sample every record n times, score, keep the records in a pass-rate band.

Stages, as in evaluation: loader processes read each record's media (frame-cache entry or
decode) ahead of generation into a bounded queue; the engine samples the record's n responses
(``sampler.py``: per-record seeds, so a resumed run samples what an uninterrupted one would);
the reward library scores them as training does (the record's task decides the scorer); one JSON
line per record is appended to ``OUT/responses.jsonl`` and flushed. After SIGKILL a rerun reads
that file (a torn last line is skipped), reuses the records recorded under the same settings
digest (model fingerprint, n, sampling, seed, engine, frame settings, prompt template) and samples
the rest; ``outputs.py`` then writes every result from the file alone, so a resumed run's outputs
equal an uninterrupted run's. A record whose media cannot be loaded is recorded with its reason
and sampled again by the next run (it may have been fixed); the job goes on.

Prompts are the *training* prompts (``data.prompt_template``, default ``plain``): the point is how
the model does on the questions it would be trained on.
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import queue
import sys
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from ..data.config import DataConfig
from ..data.dataset import RecordDataset, encode_prompts, load_media, prompt_parts
from ..data.prompt import format_question
from ..evaluation.config import digest_of
from ..evaluation.pipeline import frame_settings
from ..evaluation.predictions import PredictionWriter, read_predictions
from ..evaluation.rows import prompt_sha, reward_digest
from ..media.cache import VideoLoader
from ..rewards import RewardConfig, score_records
from ..rollout.base import SamplingConfig
from .inputs import InputFile, InputRecord
from .passes import Band, PassRule
from .sampler import Sampled, generate_hf, record_seed, submit_vllm

RESPONSES = "responses.jsonl"
_DONE = object()


@dataclass
class FilterSettings:
    """How records are sampled and judged (flags of ``easyvideor1 filter``).

    Attributes:
        n: Responses sampled per record.
        temperature / top_p / top_k: Sampling (default: training rollouts' 1.0 / 1.0 / whole vocab).
        max_new_tokens: Response length limit (default: ``rollout.max_new_tokens``).
        seed: Run seed; each record's seed derives from it and the record's id.
        keep: Kept pass-rate band ``LO:HI``, inclusive (``passes.py``).
        pass_threshold: ``X`` or ``TASK=X`` items (``passes.py``); empty = per-task defaults.
        engine: ``hf`` (one ``generate`` per record) or ``vllm`` (``AsyncLLM``).
        dtype: Weights dtype of either engine.
        load_workers: Media loader processes.
        queue_size: Loaded records waiting for the engine (bounds memory).
        max_in_flight: vLLM: records submitted at once.
    """

    n: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 64
    seed: int = 0
    keep: str = "0.1:0.9"
    pass_threshold: list[str] = field(default_factory=list)
    engine: str = "hf"
    dtype: str = "float32"
    load_workers: int = 2
    queue_size: int = 8
    max_in_flight: int = 64

    def __post_init__(self) -> None:
        for key in ("n", "max_new_tokens", "load_workers", "queue_size", "max_in_flight"):
            if getattr(self, key) < 1:
                raise ValueError(f"filter {key}: must be at least 1, got {getattr(self, key)}")
        if self.temperature < 0:
            raise ValueError(f"filter temperature: must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"filter top_p: must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"filter top_k: must be >= 0, got {self.top_k}")
        if self.engine not in ("hf", "vllm"):
            raise ValueError(f"filter engine: {self.engine!r} is not one of hf, vllm")
        self.band, self.rule = Band.parse(self.keep), PassRule.parse(self.pass_threshold)

    def sampling(self) -> SamplingConfig:
        return SamplingConfig(
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            max_new_tokens=self.max_new_tokens,
        )

    def generation(self) -> dict[str, Any]:
        """What decides the responses (the digest's part from these settings). Sampled responses
        depend on the engine's random streams, so the engine is part of it unless decoding is greedy
        (greedy predictions are engine-independent, as evaluation tests)."""
        keys = ("n", "temperature", "top_p", "top_k", "max_new_tokens", "seed")
        out = {k: getattr(self, k) for k in keys}
        if self.temperature > 0:
            out["engine"] = self.engine
        return out


def settings_digest(settings: FilterSettings, data: DataConfig, model_id: str) -> str:
    """Model fingerprint + generation + frame settings (where frames come from is left out, as in eval)."""
    return digest_of({"filter": settings.generation(), "data": frame_settings(data), "model": model_id})


@dataclass
class _Job:
    items: list[InputRecord]
    dataset: RecordDataset
    processor: Any
    settings: FilterSettings
    digest: str
    reward: RewardConfig
    prompts: list[str]

    def failure(self, i: int, error: str) -> dict:
        return {
            "sample_id": self.items[i].sample_id,
            "settings": self.digest,
            "prompt_sha": prompt_sha(self.prompts[i]),
            "failed": True,
            "error": error,
        }

    def scored(self, i: int, out: Sampled) -> dict:
        rec = self.items[i].record
        row = {
            "sample_id": self.items[i].sample_id,
            "settings": self.digest,
            "prompt_sha": prompt_sha(self.prompts[i]),
            "failed": False,
            "responses": out.texts,
            "output_tokens": out.tokens,
            "truncated": out.truncated,
        }
        return score_row(row, rec, self.reward)

    def seed(self, i: int) -> int:
        return record_seed(self.settings.seed, str(self.items[i].sample_id))


def score_row(row: dict, record, reward: RewardConfig) -> dict:
    """``row`` with each response's reward (``overall``, ``accuracy``, ``format``, ``task``, the
    extracted ``prediction``, ``error`` if the task raised), scored as training scores."""
    n = len(row["responses"])
    results = score_records(row["responses"], [record] * n, row["output_tokens"], reward)
    keep = ("overall", "accuracy", "format", "task", "prediction", "error")
    scores = [{k: r[k] for k in keep if k in r} for r in results]
    return {**row, "scores": scores, "scoring": reward_digest(reward)}


def to_sample(
    files: list[InputFile], data: DataConfig, settings: FilterSettings, out_dir: str, model_id: str
) -> tuple[list[InputRecord], list[str], list[int]]:
    """The usable records, their prompts, and the indices of those ``OUT/responses.jsonl`` lacks
    (not recorded under this digest, recorded as failed, or recorded for another prompt)."""
    done = read_predictions(os.path.join(out_dir, RESPONSES), settings_digest(settings, data, model_id)).rows
    items = [item for f in files for item in f.items if item.record is not None]
    prompts = [format_question(item.record, data.prompt_template) for item in items]
    todo = [
        i
        for i, item in enumerate(items)
        if (row := done.get(item.sample_id)) is None
        or row.get("failed")
        or row.get("prompt_sha") != prompt_sha(prompts[i])
    ]
    return items, prompts, todo


def run_filter(
    files: list[InputFile],
    data: DataConfig,
    reward: RewardConfig,
    settings: FilterSettings,
    out_dir: str,
    model_id: str,
    engine,
    processor,
    loader: VideoLoader | None = None,
) -> dict[str, Any]:
    """Sample what ``OUT/responses.jsonl`` lacks; returns ``records``, ``sampled`` (now), ``reused``, ``seconds``."""
    t0 = time.perf_counter()
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, RESPONSES)
    digest = settings_digest(settings, data, model_id)
    items, prompts, todo = to_sample(files, data, settings, out_dir, model_id)
    loader = loader or VideoLoader(data.cache_dir, data.cache_mode, data.decode_time_limit)
    dataset = RecordDataset([item.record for item in items], data, [item.file for item in items], loader)
    job = _Job(items, dataset, processor, settings, digest, reward, prompts)
    print(f"filter: {len(items) - len(todo)} of {len(items)} records already sampled; {len(todo)} to go")
    ready: queue.Queue = queue.Queue(maxsize=settings.queue_size)
    threading.Thread(target=_produce, args=(dataset, todo, settings, ready), daemon=True).start()
    with PredictionWriter(path) as out:
        if getattr(engine, "streaming", False):
            _stream(ready, engine, job, out.write, len(todo))
        else:
            _one_by_one(ready, engine, job, out.write, len(todo))
    return {
        "records": len(items),
        "sampled": len(todo),
        "reused": len(items) - len(todo),
        "seconds": time.perf_counter() - t0,
    }


def _progress(k: int, total: int) -> None:
    if total and (k == total or k % max(1, total // 20) == 0):
        print(f"filter: {k}/{total} records sampled", file=sys.stderr, flush=True)


def _one_by_one(ready: queue.Queue, engine, job: _Job, write, total: int) -> None:
    """HF engine: one ``generate`` per record (its n responses are the batch)."""
    k = 0
    while (item := _next(ready)) is not _DONE:
        i, sample, err = item
        if err is None:
            try:
                prompts = encode_prompts(job.processor, [sample], job.dataset.cfg, job.dataset.loader)
                sampled = generate_hf(engine, prompts, job.settings.n, job.settings.sampling(), job.seed(i))
            except Exception as e:  # e.g. a prompt the model cannot take: listed, the job goes on
                err = f"{type(e).__name__}: {e}"
        write([job.failure(i, err) if err is not None else job.scored(i, sampled)])
        k += 1
        _progress(k, total)


def _stream(ready: queue.Queue, engine, job: _Job, write, total: int) -> None:
    """vLLM engine: one request per record, submitted when loaded, written when finished."""
    pending: dict = {}
    finished, k = False, 0
    while not finished or pending:
        while not finished and len(pending) < job.settings.max_in_flight:
            try:
                item = _next(ready, block=not pending)
            except queue.Empty:
                break
            if item is _DONE:
                finished = True
                break
            i, sample, err = item
            if err is not None:
                write([job.failure(i, err)])
                k += 1
                continue
            try:
                text, media = prompt_parts(job.processor, sample, job.dataset.cfg, job.dataset.loader)
                key = str(job.items[i].sample_id)
                fut = submit_vllm(
                    engine, key, text, media, job.settings.n, job.settings.sampling(), job.seed(i)
                )
            except Exception as e:
                write([job.failure(i, f"{type(e).__name__}: {e}")])
                k += 1
                continue
            pending[fut] = i
        if not pending:
            continue
        done, _ = wait(pending, timeout=0.05, return_when=FIRST_COMPLETED)
        for fut in sorted(done, key=lambda f: pending[f]):
            i = pending.pop(fut)
            try:
                write([job.scored(i, fut.result())])
            except Exception as e:  # the request failed (e.g. longer than the engine allows)
                write([job.failure(i, f"{type(e).__name__}: {e}")])
            k += 1
            _progress(k, total)


def _next(ready: queue.Queue, block: bool = True):
    item = ready.get(block=block)
    if isinstance(item, BaseException):  # the loader thread died: stop with its error
        raise RuntimeError(f"media loading stopped: {type(item).__name__}: {item}") from item
    return item


_LOADER_DATASET: RecordDataset | None = None


def _produce(dataset: RecordDataset, todo: list[int], settings: FilterSettings, ready: queue.Queue) -> None:
    """Loader processes, in input order, at most ``queue_size`` records ahead of the engine."""
    global _LOADER_DATASET
    try:
        _LOADER_DATASET = dataset  # inherited by the forked loaders
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(settings.load_workers, mp_context=ctx, initializer=_loader_init) as pool:
            pending = iter(todo)
            window = collections.deque(pool.submit(_load_one, i) for i in _take(pending, settings.queue_size))
            while window:
                item = window.popleft().result()
                window.extend(pool.submit(_load_one, i) for i in _take(pending, 1))
                ready.put(item)
        ready.put(_DONE)
    except BaseException as e:  # never leave the engine waiting for a queue nobody fills
        ready.put(e)


def _take(it, k: int) -> list[int]:
    return [x for _, x in zip(range(k), it, strict=False)]


def _loader_init() -> None:
    import torch

    from ..media.workers import die_with_parent

    die_with_parent()  # a killed filter must not leave its loaders behind
    torch.set_num_threads(1)


def _load_one(i: int):
    """Loader process body: the record's sample with its media, or the reason it could not load."""
    try:
        sample = _LOADER_DATASET[i]
        sample.loaded = load_media(sample, _LOADER_DATASET.cfg, _LOADER_DATASET.loader)
        return i, sample, None
    except Exception as e:
        return i, None, f"{type(e).__name__}: {e}"
