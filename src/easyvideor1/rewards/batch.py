"""Batch scoring: cheap tasks in the calling process, expensive ones (code, math) in a process pool,
judged ones then asked of the endpoint judge (``judge_scoring.py``).

The pool is created on first use and reused (spawn start method: safe in a multi-threaded trainer;
its workers import the library once). Cheap rule-based scores are computed while the pool works.
:func:`submit_scores` returns as soon as the cheap scores are done and the judge requests sent
(:class:`PendingScores`), so a caller can generate more while the judge answers.
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any

from easyvideor1.rewards.config import RewardConfig
from easyvideor1.rewards.judge_scoring import Slot, fold_judgements, judged_tasks, submit_judgements
from easyvideor1.rewards.registry import load_task_files, resolve_task
from easyvideor1.rewards.scoring import record_errors, record_item, score_items

_pool: ProcessPoolExecutor | None = None
_pool_workers = 0
_pool_lock = threading.Lock()


def default_workers() -> int:
    """Pool size when none is given: the usable cores, at most 8."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(8, cores))


def _get_pool(workers: int) -> ProcessPoolExecutor:
    global _pool, _pool_workers
    with _pool_lock:
        if _pool is None or _pool_workers != workers:
            if _pool is not None:
                _pool.shutdown(wait=False, cancel_futures=True)
            _pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
            _pool_workers = workers
        return _pool


def shutdown_pool() -> None:
    """Stop the worker processes (they are restarted on the next batch that needs them)."""
    global _pool
    with _pool_lock:
        if _pool is not None:
            _pool.shutdown(wait=True, cancel_futures=True)
            _pool = None


atexit.register(shutdown_pool)


def compute_scores(
    items: Sequence[Mapping[str, Any]], config: RewardConfig | None = None, workers: int | None = None
) -> list[dict[str, Any]]:
    """Score a batch of records; results are in the order of `items`.

    Args:
        items: dicts with `response`, `ground_truth`, `problem_type`, optional `options`, and any
            other record field (passed to the task as metadata).
        config: reward configuration (defaults: `RewardConfig()`).
        workers: processes for expensive tasks; `None` uses `default_workers()`, 0 scores
            everything in this process.

    Errors inside tasks are recorded (see `scoring`), counted once here, and returned in `error`.
    """
    return submit_scores(items, config, workers).result()


@dataclass
class PendingScores:
    """A batch being scored: the rule scores so far, the pool's chunks, the judge's requests."""

    items: Sequence[Mapping[str, Any]]
    config: RewardConfig
    results: list[dict[str, Any] | None]
    pool_chunks: list[tuple[list[int], Future]]
    judged: list[Slot]

    def result(self) -> list[dict[str, Any]]:
        """Wait for the pool and the judge; the results in the order of the items."""
        for chunk, future in self.pool_chunks:
            for index, result in zip(chunk, future.result(), strict=True):
                self.results[index] = result
            # an expensive task the judge also scores is asked once its rule score is back
            self.judged += submit_judgements(self.items, self.results, self.config, chunk)
        self.pool_chunks = []
        final = [result for result in self.results if result is not None]
        fold_judgements(final, self.judged, self.config)
        self.judged = []
        record_errors(final)
        return final


def submit_scores(
    items: Sequence[Mapping[str, Any]], config: RewardConfig | None = None, workers: int | None = None
) -> PendingScores:
    """:func:`compute_scores` without waiting for the process pool or the judge."""
    config = config or RewardConfig()
    if config.reward_function:
        return PendingScores(items, config, list(score_items(items, config)), [], [])
    load_task_files(config.task_files)
    expensive = [index for index, item in enumerate(items) if resolve_task(item["problem_type"]).expensive]
    workers = default_workers() if workers is None else workers
    results: list[dict[str, Any] | None] = [None] * len(items)
    futures: list[tuple[list[int], Future]] = []
    if workers > 0 and expensive:
        pool = _get_pool(workers)
        size = max(1, -(-len(expensive) // (workers * 4)))  # ~4 chunks per worker balances load
        for start in range(0, len(expensive), size):
            chunk = expensive[start : start + size]
            futures.append((chunk, pool.submit(score_items, [items[i] for i in chunk], config)))
        remote = set(expensive)
    else:
        remote = set()
    local = [index for index in range(len(items)) if index not in remote]
    for index, result in zip(local, score_items([items[i] for i in local], config), strict=True):
        results[index] = result
    judged = submit_judgements(items, results, config, local)
    return PendingScores(items, config, results, futures, judged)


def score_records(
    responses: Sequence[str],
    records: Sequence[Any],
    lengths: Sequence[int],
    config: RewardConfig | None = None,
    workers: int | None = None,
) -> list[dict[str, Any]]:
    """Score ``responses[i]`` (``lengths[i]`` tokens) against ``records[i]`` with :func:`compute_scores`:
    the one scoring call of training rollouts and validation (expensive tasks in the process pool)."""
    if not len(responses) == len(records) == len(lengths):
        raise ValueError(
            f"score_records: {len(responses)} responses, {len(records)} records, {len(lengths)} lengths"
        )
    items = [record_item(r, rec, n) for r, rec, n in zip(responses, records, lengths, strict=True)]
    return compute_scores(items, config, workers)


def prefetch_judgements(
    responses: Sequence[str], records: Sequence[Any], lengths: Sequence[int], config: RewardConfig
) -> int:
    """Send the endpoint judge's requests for these responses now and return (how many were sent).

    The trainer calls it on each chunk of a step's rollouts as soon as it is generated, so the
    judge answers while the later chunks generate. The answers are shared with the scoring of
    the whole batch afterwards (the client's in-flight and recent requests), not asked twice; the
    cheap rule scores that read the answers are simply computed again then.
    """
    load_task_files(config.task_files)
    tasks = judged_tasks(config)
    if not tasks:
        return 0
    items = [record_item(r, rec, n) for r, rec, n in zip(responses, records, lengths, strict=True)]
    specs = [resolve_task(item["problem_type"]) for item in items]
    judged = [i for i, spec in enumerate(specs) if spec.name in tasks and not spec.expensive]
    results: list[dict[str, Any] | None] = [None] * len(items)
    for index, result in zip(judged, score_items([items[i] for i in judged], config), strict=True):
        results[index] = result
    return len(submit_judgements(items, results, config, judged))
