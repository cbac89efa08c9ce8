"""The evaluation pipeline: media loading overlapped with generation, resumable, failures counted.

Stages: a pool of loader processes reads each sample's media (cache entry or decode) into a
bounded queue -> the engine generates for batches of ready samples (HF), or each sample is
submitted as its own request the moment it is ready and collected when it finishes (vLLM
``AsyncLLM``, at most ``max_in_flight`` at once) ->
the reward library scores -> one JSON line per sample is appended to ``predictions.jsonl`` and
flushed. The queue bound keeps memory flat on long videos (back-pressure). A rerun skips exactly
the samples already recorded under the same settings hash; a sample whose media cannot be loaded is
recorded as a failure and counts as wrong.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import multiprocessing
import os
import queue
import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from ..data.config import DataConfig
from ..data.dataset import RecordDataset, encode_prompts, load_media, prompt_parts
from ..data.records import Record
from ..rewards import score_record
from ..rollout.base import SamplingConfig
from .prompts import render_prompt
from .registry import BenchmarkSpec

_DONE = object()


@dataclasses.dataclass
class EvalSettings:
    """What makes two runs comparable (hashed into every prediction line)."""

    style: str = "direct"
    max_new_tokens: int = 32
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    presence_penalty: float = 0.0
    preset: str | None = None
    # reported, not hashed: greedy predictions are engine-independent (tested), so a run may be
    # resumed with the other engine
    engine: str = "hf"
    batch_size: int = 4
    load_workers: int = 2
    queue_size: int = 8
    max_samples: int | None = None
    max_in_flight: int = 64

    def digest(self, data: DataConfig, model: str) -> str:
        keep = {
            k: v
            for k, v in dataclasses.asdict(self).items()
            if k not in ("batch_size", "load_workers", "queue_size", "max_in_flight", "engine")
        }
        blob = json.dumps(
            {"eval": keep, "data": dataclasses.asdict(data), "model": os.path.abspath(model)},
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _recorded(path: str, digest: str) -> dict[str, dict]:
    done: dict[str, dict] = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by a kill: that sample is simply redone
                if row.get("settings") == digest:
                    done[row["sample_id"]] = row
    return done


def _with_prompt(rec: Record, style: str) -> Record:
    return dataclasses.replace(rec, problem=render_prompt(rec, style))


def run_benchmark(
    spec: BenchmarkSpec,
    records: list[Record],
    annotation_file: str,
    engine,
    processor,
    data: DataConfig,
    settings: EvalSettings,
    out_dir: str,
    model_path: str,
    loader=None,
) -> dict[str, Any]:
    """Evaluate one benchmark; returns its results (also written to ``<out>/<name>/results.json``)."""
    t0 = time.perf_counter()
    bench_dir = os.path.join(out_dir, spec.name)
    os.makedirs(bench_dir, exist_ok=True)
    pred_path = os.path.join(bench_dir, "predictions.jsonl")
    digest = settings.digest(data, model_path)
    records = records[: settings.max_samples] if settings.max_samples else records
    prompted = [_with_prompt(r, settings.style) for r in records]
    dataset = RecordDataset(prompted, eval_data_config(data), annotation_file, loader)
    done = _recorded(pred_path, digest)
    todo = [i for i, r in enumerate(records) if r.problem_id not in done]
    sampling = SamplingConfig(
        temperature=settings.temperature,
        top_p=settings.top_p,
        top_k=settings.top_k,
        max_new_tokens=settings.max_new_tokens,
        presence_penalty=settings.presence_penalty,
    )
    ready: queue.Queue = queue.Queue(maxsize=settings.queue_size)
    timing = {"load": 0.0, "generate": 0.0}

    def produce():
        # Loader processes, not threads: decoding holds the GIL long enough to stall generation.
        global _LOADER_DATASET
        _LOADER_DATASET = dataset  # inherited by the forked loaders
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(
            max_workers=max(1, settings.load_workers), mp_context=ctx, initializer=_loader_init
        ) as pool:
            for item, seconds in pool.map(_load_one, todo):  # in order: resumes stay deterministic
                timing["load"] += seconds
                ready.put(item)
        ready.put(_DONE)

    threading.Thread(target=produce, daemon=True).start()
    with open(pred_path, "a", encoding="utf-8") as out:
        if out.tell() and not _ends_with_newline(pred_path):
            out.write("\n")  # a kill cut the last line: never glue a new row onto it

        def write(rows: list[dict]) -> None:
            for row in rows:
                out.write(json.dumps(row) + "\n")
            out.flush()
            os.fsync(out.fileno())

        if getattr(engine, "streaming", False):
            _stream(
                ready, engine, processor, dataset, sampling, digest, timing, write, settings.max_in_flight
            )
        else:
            _batches(ready, engine, processor, dataset, sampling, digest, timing, write, settings.batch_size)
    # what the digest stands for, readable: sampling, engine, frame budget
    frames = {
        k: v for k, v in dataclasses.asdict(data).items() if k.startswith(("video_", "image_", "model_"))
    }
    detail = {"eval": dataclasses.asdict(settings), "frames": frames}
    results = write_results(
        spec, records, pred_path, digest, bench_dir, time.perf_counter() - t0, timing, detail
    )
    from .report import write_sample_pages

    write_sample_pages(bench_dir, records, dataset)
    return results


def _batches(ready, engine, processor, dataset, sampling, digest, timing, write, batch_size: int) -> None:
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
        write(_generate_and_score(batch, engine, processor, dataset, sampling, digest, timing))


def _stream(ready, engine, processor, dataset, sampling, digest, timing, write, max_in_flight: int) -> None:
    """One request per sample, submitted when ready; rows written in the order requests finish."""
    pending: dict[Future, tuple[int, Any]] = {}
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
                write([_failure_row(i, sample, err, digest)])
                continue
            text, media = prompt_parts(processor, sample, dataset.cfg, dataset.loader)
            pending[engine.submit(sample.record.problem_id, text, media, sampling)] = (i, sample)
        if not pending:
            continue
        done, _ = wait(pending, timeout=0.02, return_when=FIRST_COMPLETED)
        rows = []
        for future in done:
            i, sample = pending.pop(future)
            try:
                out = future.result()
            except Exception as e:  # e.g. a prompt longer than the engine allows: counted as wrong
                rows.append(_failure_row(i, sample, f"{type(e).__name__}: {e}", digest))
                continue
            rows.append(_scored_row(i, sample, out.texts[0], int(out.mask.sum()), digest))
        if rows:
            write(sorted(rows, key=lambda r: r["index"]))
    timing["generate"] += time.perf_counter() - t0  # wall time of the generation stage


_LOADER_DATASET = None


def _loader_init() -> None:
    import torch

    torch.set_num_threads(1)


def _load_one(i: int):
    """Loader process body: one sample with its media loaded (or the reason it could not be)."""
    t = time.perf_counter()
    sample = _LOADER_DATASET[i]
    try:
        sample.loaded = load_media(sample, _LOADER_DATASET.cfg, _LOADER_DATASET.loader)
        item = (i, sample, None)
    except Exception as e:  # recorded as a failure, counted as wrong
        item = (i, sample, f"{type(e).__name__}: {e}")
    return item, time.perf_counter() - t


def _ends_with_newline(path: str) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def eval_data_config(data: DataConfig) -> DataConfig:
    return dataclasses.replace(data, prompt_template="none")  # the evaluation prompt is already rendered


def _failure_row(i: int, sample, err: str, digest: str) -> dict:
    return {
        "sample_id": sample.record.problem_id,
        "index": i,
        "settings": digest,
        "failed": True,
        "error": err,
        "prediction": None,
        "accuracy": 0.0,
    }


def _scored_row(i: int, sample, text: str, n_tokens: int, digest: str) -> dict:
    rec = sample.record
    res = score_record(text, rec, response_length=n_tokens)
    return {
        "sample_id": rec.problem_id,
        "index": i,
        "settings": digest,
        "failed": False,
        "prediction": text,
        "extracted": res.get("prediction"),
        "output_tokens": n_tokens,
        **{k: res[k] for k in ("accuracy", "format", "overall", "tiou", "box_iou") if k in res},
    }


def _generate_and_score(batch, engine, processor, dataset, sampling, digest, timing) -> list[dict]:
    rows = [_failure_row(i, s, err, digest) for i, s, err in batch if err is not None]
    good = [(i, s) for i, s, err in batch if err is None]
    if good:
        t = time.perf_counter()
        try:
            prompts = encode_prompts(processor, [s for _, s in good], dataset.cfg, dataset.loader)
            out = engine.generate(prompts, [1] * len(good), sampling)
        except Exception as e:
            timing["generate"] += time.perf_counter() - t
            if len(good) == 1:  # this sample's request failed: recorded, counted as wrong
                i, s = good[0]
                return sorted(rows + [_failure_row(i, s, f"{type(e).__name__}: {e}", digest)], key=_index)
            # one bad sample must not sink its batch-mates: retry them one by one
            for i, s in good:
                rows += _generate_and_score(
                    [(i, s, None)], engine, processor, dataset, sampling, digest, timing
                )
            return sorted(rows, key=_index)
        timing["generate"] += time.perf_counter() - t
        for (i, s), text, n in zip(good, out.texts, out.mask.sum(1).tolist(), strict=True):
            rows.append(_scored_row(i, s, text, n, digest))
    return sorted(rows, key=_index)


def _index(row: dict) -> int:
    return row["index"]


def write_results(
    spec, records, pred_path, digest, bench_dir, seconds, timing, detail: dict | None = None
) -> dict[str, Any]:
    rows = _recorded(pred_path, digest)
    scored = [(r, rows[r.problem_id]) for r in records if r.problem_id in rows]
    results = {
        "benchmark": spec.name,
        **spec.aggregate(scored),
        "samples": len(records),
        "evaluated": len(scored),
        "failures": sum(1 for _, r in scored if r.get("failed")),
        "extraction_failures": sum(
            1 for _, r in scored if not r.get("failed") and r.get("extracted") is None
        ),
        "seconds": round(seconds, 2),
        "stage_seconds": {k: round(v, 2) for k, v in timing.items()},
        "settings": digest,
        "settings_detail": detail,
    }
    with open(os.path.join(bench_dir, "results.json"), "w", encoding="utf-8") as f:
        json.dump(results, f, indent=1)
    return results
