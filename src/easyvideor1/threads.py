"""How many intra-op threads a process's CPU work uses: chosen on purpose, never oversubscribing.

torch's default is one OpenMP thread per core of the machine. On a machine whose cores are
shared (other jobs, sibling ranks, our own loader processes) that is the worst choice: OpenMP
threads spin waiting for each other while the cores they wait on run someone else. Measured on
this project's 2-core machine (``benchmarks/threads_under_load.py``, the demo's RL step, median;
other jobs shared the machine throughout, load average 4-8, so "alone" is not quiet):

    ==========================  =======  ===================  ====================
    step (s)                    alone    + 1 busy process     + 3 busy processes
    ==========================  =======  ===================  ====================
    torch default (2 threads)   16.19    29.36                51.94
    chosen (1 thread)            2.11     6.61                16.41
    ==========================  =======  ===================  ====================

Whatever else runs, one thread per core that is actually free beats a thread per core by 3-8x here.
The OpenMP wait policy (``OMP_WAIT_POLICY``) is left as it is: it matters only for a team of
several threads, and it was not measured.

The rule, in order (:func:`choose_threads`):

1. an explicit count wins: the ``cpu.threads`` config key (> 0), else ``OMP_NUM_THREADS`` in the
   environment (empty counts as unset). ``torchrun`` exports ``OMP_NUM_THREADS=1`` to every rank
   of a node with several ranks unless the variable exists: one thread per rank for the media
   processor on a node of many cores. That ``1`` (a torchrun rank, ``TORCHELASTIC_RUN_ID`` set,
   ``LOCAL_WORLD_SIZE`` > 1) is read as torchrun's default, not a choice: the ranks choose as in
   2 (``cpu.threads: 1`` asks for one thread on purpose);
2. otherwise the CPUs this process may run on (:func:`available_cpus`), less the cores other
   programs keep busy right now (:func:`busy_cpus`), less the cores reserved for our own worker
   processes (e.g. eval loaders), divided among the ``processes`` that start together (torchrun
   ranks of one node), at least 1.

Busy cores are left alone because a core someone else keeps busy gives an OpenMP thread a time
slice at best, and every other thread of the team waits for that slice at each parallel region.

CPUs available, each source capping the previous one:

- affinity: ``os.sched_getaffinity(0)`` (``taskset``, a cpuset cgroup, Slurm's ``--cpus-per-task``
  binding, ``docker --cpuset-cpus``);
- cgroup v2 quota: ``/sys/fs/cgroup/<own cgroup>/cpu.max`` and its ancestors, ``"QUOTA PERIOD"``
  (``"max PERIOD"``: none); ``docker --cpus``, Kubernetes CPU limits;
- cgroup v1 quota: ``/sys/fs/cgroup/cpu/cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (also under
  ``cpu,cpuacct``; quota ``-1``: none).

A quota of 1.5 CPUs gives 1 thread (rounded down: a thread beyond the quota is throttled).

This module imports no torch (the CLI imports it before deciding whether torch is needed);
:func:`apply` imports torch when it sets the counts.
"""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .errors import UserError
from .validation import whole_number

# how long busy_cpus() watches /proc/stat: 20 scheduler ticks at 100 Hz, short enough for a start-up
BUSY_SAMPLE_S = 0.2


@dataclass
class CPUConfig:
    """CPU threads of each process (``cpu``), for every command.

    Parameters:
        threads: Intra-op threads per process (torch / OpenMP). 0 (default): chosen from the CPUs
            available to the process (affinity, cgroup quota), less the cores other programs keep
            busy, divided among the ranks of the node; ``OMP_NUM_THREADS`` in the environment is
            used when set. A number > 0 is used as given (it wins over ``OMP_NUM_THREADS``).
            Under ``torchrun`` each rank's share is the node's free cores / ``LOCAL_WORLD_SIZE``
            (e.g. 16 cores, 8 ranks: 2 threads for a rank's media processing and CPU ops): the
            ``OMP_NUM_THREADS=1`` torchrun exports by default is not taken as a choice. Set
            ``cpu.threads`` (or ``OMP_NUM_THREADS`` to another value) to override.
    """

    threads: int = 0

    def __post_init__(self) -> None:
        whole_number("cpu.threads", self.threads, 0, "0: chosen from the CPUs available")


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    source: str  # "cpu.threads", "OMP_NUM_THREADS" or "available"
    available: int
    busy: int
    processes: int = 1
    reserved: int = 0

    def describe(self) -> str:
        if self.source != "available":
            return f"threads: {self.threads} intra-op (from {self.source})"
        parts = [f"{self.available} CPUs available", f"{self.busy} busy"]
        if self.reserved:
            parts.append(f"{self.reserved} for our workers")
        if self.processes > 1:
            parts.append(f"{self.processes} processes")
        return f"threads: {self.threads} intra-op ({', '.join(parts)})"


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _quota(quota: str, period: str) -> float | None:
    """CPUs a quota allows, or None for no quota (``max`` / ``-1``) or text that is not one."""
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def _own_cgroup_v2(root: Path) -> str:
    """This process's cgroup v2 path (``0::/path`` in /proc/self/cgroup), '' when unknown."""
    for line in (_read(root / "proc/self/cgroup") or "").splitlines():
        if line.startswith("0::"):
            return line[3:].strip("/")
    return ""


def cgroup_cpus(root: str | os.PathLike = "/") -> float | None:
    """CPUs the cgroup quota allows (the smallest along the way), None without a quota."""
    root, limits = Path(root), []
    cg = root / "sys/fs/cgroup"
    # v2: the own cgroup and every ancestor (a parent's limit binds its children); inside a
    # container the own cgroup is usually mounted as the root itself
    rel = _own_cgroup_v2(root)
    parts = rel.split("/") if rel else []
    for depth in range(len(parts), -1, -1):
        text = _read(cg.joinpath(*parts[:depth], "cpu.max"))
        if text and len(text.split()) == 2:
            limits.append(_quota(*text.split()))
    for v1 in ("cpu", "cpu,cpuacct"):
        quota, period = _read(cg / v1 / "cpu.cfs_quota_us"), _read(cg / v1 / "cpu.cfs_period_us")
        if quota and period:
            limits.append(_quota(quota, period))
    limits = [x for x in limits if x is not None]
    return min(limits) if limits else None


def affinity_cpus() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # not Linux: every CPU
        return set(range(os.cpu_count() or 1))


def available_cpus(root: str | os.PathLike = "/", affinity: set[int] | None = None) -> int:
    """CPUs this process may use: the affinity set, capped by the cgroup quota (at least 1)."""
    n = len(affinity if affinity is not None else affinity_cpus())
    quota = cgroup_cpus(root)
    if quota is not None:
        n = min(n, math.floor(quota))
    return max(1, n)


def _cpu_ticks(root: Path, cpus: set[int]) -> tuple[int, int] | None:
    """(busy, total) ticks of ``cpus`` so far, from /proc/stat's per-CPU lines."""
    text = _read(root / "proc/stat")
    if text is None:
        return None
    busy = total = 0
    for line in text.splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        ticks = [int(x) for x in fields[:8]]  # user nice system idle iowait irq softirq steal
        total += sum(ticks)
        busy += sum(ticks) - ticks[3] - ticks[4]
    return busy, total


def busy_cpus(
    root: str | os.PathLike = "/", affinity: set[int] | None = None, sample_s: float = BUSY_SAMPLE_S
) -> float:
    """Cores of our affinity set that other programs kept busy over ``sample_s`` seconds.

    Our own process's CPU time in the window (its other threads) is not counted. 0 when
    /proc/stat cannot be read (not Linux)."""
    root, cpus = Path(root), affinity if affinity is not None else affinity_cpus()
    before, own_before = _cpu_ticks(root, cpus), time.process_time()
    if before is None:
        return 0.0
    time.sleep(sample_s)
    after, own = _cpu_ticks(root, cpus), time.process_time() - own_before
    if after is None or after[1] <= before[1]:
        return 0.0
    busy, total = after[0] - before[0], after[1] - before[1]
    # ticks of all the CPUs over the window: the window's length in ticks is total / len(cpus)
    window_ticks = total / max(1, len(cpus))
    busy_cores = busy / window_ticks - own / sample_s
    return max(0.0, busy_cores)


def env_threads(env=None) -> int | None:
    """``OMP_NUM_THREADS`` as a count (None: unset or empty); a bad value is a user error."""
    env = os.environ if env is None else env
    text = (env.get("OMP_NUM_THREADS") or "").strip()
    if not text:
        return None
    try:
        n = int(text.split(",")[0])  # OpenMP allows a per-level list: the first level is ours
    except ValueError:
        raise UserError(f"OMP_NUM_THREADS={text!r}: expected a whole number > 0") from None
    if n < 1:
        raise UserError(f"OMP_NUM_THREADS={text!r}: expected a whole number > 0")
    return n


def torchrun_default(env=None) -> bool:
    """Whether ``OMP_NUM_THREADS`` is the ``1`` torchrun exports to the ranks of a multi-rank node
    when the variable was unset (its launcher cannot tell a user's 1 apart: ``cpu.threads`` can)."""
    env = os.environ if env is None else env
    ranks = (env.get("LOCAL_WORLD_SIZE") or "1").strip()
    return (
        bool(env.get("TORCHELASTIC_RUN_ID"))
        and ranks.isdigit()
        and int(ranks) > 1
        and (env.get("OMP_NUM_THREADS") or "").strip() == "1"
    )


def choose_threads(
    processes: int = 1,
    explicit: int | None = None,
    reserved: int = 0,
    env=None,
    root: str | os.PathLike = "/",
    affinity: set[int] | None = None,
    busy: float | None = None,
) -> ThreadChoice:
    """The intra-op thread count of one of ``processes`` processes starting together (module doc).

    ``explicit`` is ``cpu.threads`` (0/None: choose); ``reserved`` cores are kept for our own
    worker processes; ``busy`` (cores) is measured when not given."""
    env = os.environ if env is None else env
    if explicit:
        return ThreadChoice(explicit, "cpu.threads", 0, 0)
    from_env = env_threads(env)
    if from_env is not None and not torchrun_default(env):
        return ThreadChoice(from_env, "OMP_NUM_THREADS", 0, 0)
    processes = max(1, processes)
    cpus = affinity if affinity is not None else affinity_cpus()
    available = available_cpus(root, cpus)
    measured = busy_cpus(root, cpus) if busy is None else busy
    # ranks starting beside us show up as busy: up to processes - 1 busy cores are taken for them
    others = max(0, round(measured) - (processes - 1))
    free = available - others - max(0, reserved)
    return ThreadChoice(
        max(1, free // processes), "available", available, round(measured), processes, reserved
    )


_applied: ThreadChoice | None = None


def apply(processes: int = 1, explicit: int | None = None, reserved: int = 0) -> ThreadChoice:
    """Choose (:func:`choose_threads`) and set torch's intra-op (and, while still allowed,
    inter-op) thread counts for this process; says the choice on stderr once per process."""
    global _applied
    choice = choose_threads(processes, explicit, reserved)
    set_threads(choice.threads)
    if choice != _applied:  # one line per process (and per changed choice)
        print(choice.describe(), file=sys.stderr, flush=True)
    _applied = choice
    return choice


def set_threads(n: int) -> None:
    """Set torch's thread counts to ``n`` (a worker process that knows its share: 1)."""
    import torch

    torch.set_num_threads(n)
    try:
        # inter-op threads run torch.jit forks; torch allows setting them only once, before any
        # inter-op work started (RuntimeError afterwards): then they stay as they are
        torch.set_num_interop_threads(n)
    except RuntimeError:
        pass
