"""A process pool whose tasks have a wall-clock limit, and workers that die with their parent.

``concurrent.futures.ProcessPoolExecutor`` cannot cancel a running task, and a decoder that hangs
inside C code (decord's known failure) never returns. Here each worker owns a pipe; the parent
tracks when each task started and kills the worker process when its limit passes, reporting the
task as failed and starting a fresh worker for the rest of the queue.

Parent death: a worker must never outlive a parent killed with SIGKILL (it would sit re-parented to
pid 1, holding its memory, forever). Three layers, see :func:`die_with_parent`:
- Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``: the kernel kills the worker when its parent dies,
  even in the middle of a decode; the parent pid is checked right after setting it, since a parent
  that died before the call would never trigger the signal;
- elsewhere (macOS, or prctl refused): a daemon thread polling ``os.getppid()``;
- an idle worker blocked on its pipe also sees EOF when the parent is gone, which needs the child to
  hold none of the parent's pipe ends (a forked child inherits them all; they are closed at start).
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import Connection, wait
from typing import Any

_PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_WATCHDOG_INTERVAL_S = 0.25


def die_with_parent(expected_parent: int | None = None, *, use_prctl: bool = True) -> str:
    """Make this (child) process die as soon as its parent does; returns the mechanism used.

    Call it first thing in a child process. ``expected_parent`` is the pid of the process that
    started this one; by default ``multiprocessing.parent_process().pid`` (known without a race,
    as the parent recorded it before the fork), else ``os.getppid()``. If the parent is already
    gone (this process was re-parented), the process kills itself at once.

    Returns ``"prctl"`` (Linux: the kernel sends SIGKILL when the parent dies) or ``"watchdog"``
    (a daemon thread polls ``os.getppid()`` every 0.25 s and SIGKILLs this process when it changes).

    Linux caveat: the parent-death signal fires when the *thread* that forked this process exits,
    not only the process. Start such children from a thread that outlives them (``run_tasks``
    starts and replaces its workers in the thread that iterates it, and stops them before returning).
    """
    if expected_parent is None:
        parent = mp.parent_process()
        expected_parent = parent.pid if parent is not None and parent.pid else os.getppid()
    mechanism = "watchdog"
    if use_prctl and sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0:
                mechanism = "prctl"
        except (OSError, AttributeError):
            pass  # no libc prctl (e.g. a static or exotic libc): fall back to the watchdog
    # The parent may have died between fork and prctl: then no signal will ever come.
    if os.getppid() != expected_parent:
        _kill_self()
    if mechanism == "watchdog":
        threading.Thread(
            target=_watch_parent, args=(expected_parent,), name="parent-watchdog", daemon=True
        ).start()
    return mechanism


def _watch_parent(expected_parent: int) -> None:
    while os.getppid() == expected_parent:
        time.sleep(_WATCHDOG_INTERVAL_S)
    _kill_self()


def _kill_self() -> None:
    # SIGKILL, as the kernel would send: no cleanup handler of a half-done task may run
    os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))


# The parent's ends of every live worker pipe. A forked worker inherits them all: it closes them at
# start, or its own pipe (and its siblings') would never report EOF when the parent dies.
_parent_ends: set[Connection] = set()


def _worker_main(
    fn: Callable[[Any], Any],
    conn: Connection,
    on_exit: Callable[[], None] | None = None,
    parent_pid: int | None = None,
) -> None:
    die_with_parent(parent_pid)
    for end in list(_parent_ends):  # fork only: a spawned worker starts with an empty set
        end.close()
    _parent_ends.clear()
    from ..threads import set_threads
    from .decode import set_decode_threads

    set_threads(1)  # one process per core: no oversubscription
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
        _parent_ends.add(self.conn)
        self.proc = ctx.Process(target=_worker_main, args=(fn, child, on_exit, os.getpid()), daemon=True)
        self.proc.start()
        child.close()
        self.task: Any = None
        self.started = 0.0

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(5)
        self.close()

    def close(self) -> None:
        _parent_ends.discard(self.conn)
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
            else:
                w.close()
