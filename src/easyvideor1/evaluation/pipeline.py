"""The evaluation pipeline: media loading overlapped with generation, resumable, failures counted.

Stages: a pool of loader processes reads each sample's media (cache entry or decode) into a
bounded queue -> the engine generates for batches of ready samples (HF), or each sample is
submitted as its own request the moment it is ready and collected when it finishes (vLLM
``AsyncLLM``, at most ``max_in_flight`` at once) -> the benchmark's scorer scores -> one JSON line
per sample is appended to ``predictions.jsonl`` and flushed. The queue bound keeps memory flat on
long videos (back-pressure). A rerun skips exactly the samples already recorded under the same
settings digest (generation settings, frame budget, model *fingerprint*) with the same prompt; a
sample whose media cannot be loaded is recorded as a failure and counts as wrong.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import queue
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from ..data.config import DataConfig
from ..data.dataset import RecordDataset, build_content, encode_prompts, load_media, prompt_parts
from ..data.records import Record
from ..rewards import RewardConfig
from ..rollout.sampling import SamplingConfig
from .config import EvalConfig, digest_of
from .identity import sample_ids
from .predictions import PredictionWriter, read_predictions
from .registry import BenchmarkSpec
from .results import write_results
from .rows import failure_row, prompt_sha, scored_row

_DONE = object()
# data settings that change where frames come from, not which frames: not part of the digest
_DATA_NOT_HASHED = (
    "train_files",
    "val_files",
    "video_root",
    "cache_dir",
    "cache_mode",
    "decode_time_limit",
    "preflight",
)


@dataclasses.dataclass
class BenchmarkInputs:
    """One benchmark's samples as the model will see them: unique ids, exact prompts, media."""

    spec: BenchmarkSpec
    records: list[Record]
    ids: list[str]
    prompts: list[str]
    annotation_file: str

    @classmethod
    def build(
        cls, spec: BenchmarkSpec, records: list[Record], annotation_file: str, settings: EvalConfig
    ) -> BenchmarkInputs:
        records = records[: settings.max_samples] if settings.max_samples else records
        prompts = [spec.build_prompt(r, settings.style) for r in records]
        return cls(spec, records, sample_ids(records, spec.name), prompts, annotation_file)

    def prompted(self) -> list[Record]:
        return [dataclasses.replace(r, problem=p) for r, p in zip(self.records, self.prompts, strict=True)]

    def prompt_rows(self) -> list[dict[str, Any]]:
        """``prompts.jsonl`` rows: the user text exactly as the model receives it, media as placeholders."""
        rows = []
        for sid, rec, prompted in zip(self.ids, self.records, self.prompted(), strict=True):
            content = build_content(prompted)
            text = "".join(c["text"] if c["type"] == "text" else f"<{c['type']}>" for c in content)
            media: dict[str, Any] = {"videos": rec.videos, "images": rec.images}
            if rec.video_start is not None or rec.video_end is not None:
                media["clip"] = [rec.video_start, rec.video_end]
            rows.append(
                {
                    "sample_id": sid,
                    "prompt": text,
                    "media": media,
                    "answer": rec.answer,
                    "problem_type": rec.problem_type,
                    "options": rec.options,
                }
            )
        return rows


def frame_settings(data: DataConfig) -> dict:
    """The data settings that decide which frames (and prompt) a sample gets: what a resume digest
    covers (where frames come from, e.g. the cache directory, is left out)."""
    return {k: v for k, v in dataclasses.asdict(data).items() if k not in _DATA_NOT_HASHED}


def settings_digest(settings: EvalConfig, spec: BenchmarkSpec, data: DataConfig, model_id: str) -> str:
    return digest_of(
        {
            "eval": settings.generation_digest(spec.max_new_tokens),
            "data": frame_settings(data),
            "model": model_id,
        }
    )


def run_benchmark(
    inputs: BenchmarkInputs,
    engine,
    processor,
    data: DataConfig,
    settings: EvalConfig,
    out_dir: str,
    model_id: str,
    loader=None,
    reward: RewardConfig | None = None,
) -> dict[str, Any]:
    """Evaluate one benchmark; returns its results (also written to ``<out>/<name>/results.json``).

    ``model_id`` is :func:`~easyvideor1.evaluation.identity.model_fingerprint` of the weights."""
    t0 = time.perf_counter()
    spec = inputs.spec
    bench_dir = os.path.join(out_dir, spec.name)
    os.makedirs(bench_dir, exist_ok=True)
    pred_path = os.path.join(bench_dir, "predictions.jsonl")
    digest = settings_digest(settings, spec, data, model_id)
    dataset = RecordDataset(
        inputs.prompted(),
        eval_data_config(data, settings.style),
        inputs.annotation_file,
        loader,
        probe=settings.probe,  # blanks/shuffles frames as the loaders load them (data/probe.py)
    )
    done = read_predictions(pred_path, digest).rows
    todo = [
        i
        for i, sid in enumerate(inputs.ids)
        if done.get(sid, {}).get("prompt_sha") != prompt_sha(inputs.prompts[i])
    ]
    max_new = settings.max_new_tokens or spec.max_new_tokens
    sampling = SamplingConfig(
        temperature=settings.temperature,
        top_p=settings.top_p,
        top_k=settings.top_k,
        max_new_tokens=max_new,
        presence_penalty=settings.presence_penalty,
    )
    ready: queue.Queue = queue.Queue(maxsize=settings.queue_size)
    timing = {"load": 0.0, "generate": 0.0}
    thumbs = PredictionWriter(os.path.join(bench_dir, "thumbs.jsonl"))  # for report.html

    def produce():
        # Loader processes, not threads: decoding holds the GIL long enough to stall generation.
        global _LOADER_DATASET
        _LOADER_DATASET = dataset  # inherited by the forked loaders
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(
            max_workers=max(1, settings.load_workers), mp_context=ctx, initializer=_loader_init
        ) as pool:
            for item, seconds, thumb in pool.map(_load_one, todo):  # in order: resumes stay deterministic
                timing["load"] += seconds
                if thumb:
                    thumbs.write([{"sample_id": inputs.ids[item[0]], "thumb": thumb}])
                ready.put(item)
        ready.put(_DONE)

    threading.Thread(target=produce, daemon=True).start()
    job = _Job(inputs, dataset, processor, sampling, digest, timing, reward)
    with thumbs, PredictionWriter(pred_path) as out:
        if getattr(engine, "streaming", False):
            _stream(ready, engine, job, out.write, settings.max_in_flight)
        else:
            _batches(ready, engine, job, out.write, settings.batch_size)
    # what the digest stands for, readable: generation settings, engine, frame budget, model
    detail = {
        "eval": {**dataclasses.asdict(settings), "max_new_tokens": max_new},
        "frames": {
            k: v for k, v in dataclasses.asdict(data).items() if k.startswith(("video_", "image_", "model_"))
        },
        "model_fingerprint": model_id,
    }
    return write_results(
        inputs,
        pred_path,
        digest,
        bench_dir,
        time.perf_counter() - t0,
        timing,
        detail,
        reward,
        probe=settings.probe,
    )


@dataclasses.dataclass
class _Job:
    inputs: BenchmarkInputs
    dataset: RecordDataset
    processor: Any
    sampling: SamplingConfig
    digest: str
    timing: dict[str, float]
    reward: RewardConfig | None

    def failure(self, i: int, error: str) -> dict:
        return failure_row(self.inputs.ids[i], i, self.digest, self.inputs.prompts[i], error)

    def scored(self, i: int, text: str, n_tokens: int, truncated: bool | None) -> dict:
        return scored_row(
            self.inputs.spec,
            self.inputs.records[i],
            self.inputs.ids[i],
            i,
            self.digest,
            self.inputs.prompts[i],
            text,
            output_tokens=n_tokens,
            truncated=truncated,
            reward=self.reward,
        )


def _batches(ready, engine, job: _Job, write, batch_size: int) -> None:
    """Batched generation: take what is ready (up to ``batch_size``), generate, write, repeat."""
    finished = False
    while not finished:
        batch = []
        item = ready.get()
        while True:
            if item is _DONE:
                finished = True
                break
            batch.append(item)
            if len(batch) >= batch_size:
                break
            try:
                item = ready.get_nowait()
            except queue.Empty:
                break
        write(_generate_and_score(batch, engine, job))


def _stream(ready, engine, job: _Job, write, max_in_flight: int) -> None:
    """One request per sample, submitted when ready; rows written in the order requests finish."""
    pending: dict[Future, int] = {}
    finished = False
    t0 = time.perf_counter()
    while not finished or pending:
        while not finished and len(pending) < max_in_flight:
            try:  # block only when nothing is running
                item = ready.get(block=not pending)
            except queue.Empty:
                break
            if item is _DONE:
                finished = True
                break
            i, sample, err = item
            if err is not None:
                write([job.failure(i, err)])
                continue
            text, media = prompt_parts(job.processor, sample, job.dataset.cfg, job.dataset.loader)
            pending[engine.submit(job.inputs.ids[i], text, media, job.sampling)] = i
        if not pending:
            continue
        done, _ = wait(pending, timeout=0.02, return_when=FIRST_COMPLETED)
        rows = []
        for future in done:
            i = pending.pop(future)
            try:
                out = future.result()
            except Exception as e:  # e.g. a prompt longer than the engine allows: counted as wrong
                rows.append(job.failure(i, f"{type(e).__name__}: {e}"))
                continue
            truncated = out.truncated[0] if out.truncated else None
            rows.append(job.scored(i, out.texts[0], int(out.mask.sum()), truncated))
        if rows:
            write(sorted(rows, key=_index))
    job.timing["generate"] += time.perf_counter() - t0  # wall time of the generation stage


_LOADER_DATASET = None


def _loader_init() -> None:
    import torch

    from ..media.workers import die_with_parent

    die_with_parent()  # a killed eval must not leave its loaders behind (re-parented, holding memory)
    torch.set_num_threads(1)


def _load_one(i: int):
    """Loader process body: one sample with its media loaded (or the reason it could not be), and a
    thumbnail strip of the frames just loaded (the report never decodes a video again)."""
    from .report_html import thumbnail_strip

    t = time.perf_counter()
    sample = _LOADER_DATASET[i]
    thumb = None
    try:
        sample.loaded = load_media(sample, _LOADER_DATASET.cfg, _LOADER_DATASET.loader)
        item = (i, sample, None)
    except Exception as e:  # recorded as a failure, counted as wrong
        return (i, sample, f"{type(e).__name__}: {e}"), time.perf_counter() - t, None
    try:
        thumb = thumbnail_strip(*sample.loaded)
    except Exception:  # a sample without a thumbnail is still evaluated
        thumb = None
    return item, time.perf_counter() - t, thumb


def eval_data_config(data: DataConfig, style: str = "direct") -> DataConfig:
    """The prompt is already rendered; a thinking-template model (Qwen3.5) thinks only in the
    ``thinking`` style, unless ``data.thinking`` says otherwise."""
    thinking = style == "thinking" if data.thinking is None else data.thinking
    return dataclasses.replace(data, prompt_template="none", thinking=thinking)


def _generate_and_score(batch, engine, job: _Job) -> list[dict]:
    rows = [job.failure(i, err) for i, _, err in batch if err is not None]
    good = [(i, s) for i, s, err in batch if err is None]
    if good:
        t = time.perf_counter()
        try:
            prompts = encode_prompts(job.processor, [s for _, s in good], job.dataset.cfg, job.dataset.loader)
            out = engine.generate(prompts, [1] * len(good), job.sampling)
        except Exception as e:
            job.timing["generate"] += time.perf_counter() - t
            if len(good) == 1:  # this sample's request failed: recorded, counted as wrong
                return sorted(rows + [job.failure(good[0][0], f"{type(e).__name__}: {e}")], key=_index)
            # one bad sample must not sink its batch-mates: retry them one by one
            for i, s in good:
                rows += _generate_and_score([(i, s, None)], engine, job)
            return sorted(rows, key=_index)
        job.timing["generate"] += time.perf_counter() - t
        truncated = out.truncated or [None] * len(good)
        for (i, _), text, n, cut in zip(good, out.texts, out.mask.sum(1).tolist(), truncated, strict=True):
            rows.append(job.scored(i, text, n, cut))
    return sorted(rows, key=_index)


def _index(row: dict) -> int:
    return row["index"]
