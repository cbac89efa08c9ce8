"""A process pool whose tasks have a wall-clock limit: a stuck task's worker is killed and replaced.

``concurrent.futures.ProcessPoolExecutor`` cannot cancel a running task, and a decoder that hangs
inside C code (decord's known failure) never returns. Here each worker owns a pipe; the parent
tracks when each task started and kills the worker process when its limit passes, reporting the
task as failed and starting a fresh worker for the rest of the queue.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import Connection, wait
from typing import Any


def _worker_main(
    fn: Callable[[Any], Any], conn: Connection, on_exit: Callable[[], None] | None = None
) -> None:
    import torch

    from .decode import set_decode_threads

    torch.set_num_threads(1)  # one process per core: no oversubscription
    set_decode_threads(1)
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            msg = None  # parent gone (finished or killed)
        if msg is None:
            if on_exit is not None:
                on_exit()  # e.g. finish background writes before the process ends
            return
        task_id, arg = msg
        try:
            conn.send((task_id, True, fn(arg)))
        except Exception as e:  # report, keep serving
            detail = f"{type(e).__name__}: {e}" if str(e) else traceback.format_exc(limit=3)
            conn.send((task_id, False, detail))


class _Worker:
    def __init__(self, ctx, fn, on_exit=None):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(fn, child, on_exit), daemon=True)
        self.proc.start()
        child.close()
        self.task: Any = None
        self.started = 0.0

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(5)
        self.conn.close()


def run_tasks(
    fn: Callable[[Any], Any],
    tasks: Iterable[tuple[Any, Any]],
    workers: int,
    time_limit: float | None,
    on_exit: Callable[[], None] | None = None,
) -> Iterator[tuple[Any, bool, Any]]:
    """Run ``fn(arg)`` for each ``(task_id, arg)``; yield ``(task_id, ok, result_or_error)`` as they finish.

    ``fn`` must be a module-level function; ``on_exit`` runs in each worker before it exits normally.
    ``workers=0`` runs in this process (no time limit enforcement beyond what ``fn`` does itself;
    useful for debugging).
    """
    queue = deque(tasks)
    if workers <= 0:
        for task_id, arg in queue:
            try:
                yield task_id, True, fn(arg)
            except Exception as e:
                yield task_id, False, f"{type(e).__name__}: {e}"
        if on_exit is not None:
            on_exit()
        return
    ctx = mp.get_context("fork" if os.name == "posix" else "spawn")
    pool = [_Worker(ctx, fn, on_exit) for _ in range(min(workers, max(1, len(queue))))]
    try:
        while queue or any(w.task is not None for w in pool):
            for w in pool:
                if w.task is None and queue:
                    w.task = queue.popleft()
                    w.started = time.monotonic()
                    w.conn.send(w.task)
            busy = [w for w in pool if w.task is not None]
            ready = wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=0.2)
            now = time.monotonic()
            for i, w in enumerate(pool):
                if w.task is None:
                    continue
                task_id = w.task[0]
                if w.conn in ready:
                    try:
                        _, ok, result = w.conn.recv()
                        w.task = None
                        yield task_id, ok, result
                        continue
                    except (EOFError, OSError):
                        pass  # died while answering: handled as a crash below
                if w.conn in ready or w.proc.sentinel in ready or not w.proc.is_alive():
                    code = w.proc.exitcode
                    w.kill()
                    pool[i] = _Worker(ctx, fn, on_exit)
                    yield task_id, False, f"worker process died (exit code {code}) while processing this item"
                elif time_limit is not None and now - w.started > time_limit:
                    w.kill()
                    pool[i] = _Worker(ctx, fn, on_exit)
                    yield task_id, False, f"time limit exceeded ({time_limit:g} s); worker killed"
    finally:
        for w in pool:
            try:
                w.conn.send(None)
            except (OSError, BrokenPipeError):
                pass
        for w in pool:
            w.proc.join(60)  # workers finish their background work (a pending write) first
            if w.proc.is_alive():
                w.kill()
