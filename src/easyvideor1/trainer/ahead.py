"""Rollouts generated ahead of the update (``rollout.mode``: ``one_step_off`` / ``async``).

One background thread generates whole batches (a step's collection: rounds of dynamic sampling,
episodes, hybrid groups, the greedy baseline) one after another. Before each batch it loads the newest weights the
trainer has pushed (:meth:`~.handoff.EngineHandoff.apply_pending`), and the batch records
that version. The trainer keeps ``depth`` batches submitted: a batch submitted when the trainer
takes step ``s``'s rollouts is trained at step ``s + depth`` and starts on weights at least ``s``
updates old, so its staleness is at most ``depth``: the bound holds by construction (``wait``).
With ``drop`` one more batch is kept in flight, so the engine never waits on the trainer; a batch
staler than the bound is dropped when taken, its prompts given back to the sampler, and counted.

Every batch also records the prompts it drew (sampler indices, filtered-out refills included), so
a checkpoint can give back what is in flight: a resumed run draws those prompts again and
regenerates them on the restored weights (none trained twice, none lost).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from .distributed import collectives_on, new_thread_group
from .handoff import EngineHandoff
from .state import Step


class RolloutsAhead:
    """``depth`` batches in flight on one rollout thread.

    ``collect(version)`` runs one step's collection on the engine holding the weights of
    ``version``: a :class:`~.state.Step` recording its metrics and every sampler index it drew. Under torchrun its collectives (dynamic
    sampling's joint decisions, skipped records) run on a process group of their own, created
    here on every rank.
    """

    def __init__(self, collect: Callable[[int], Step], handoff: EngineHandoff, depth: int):
        self.collect, self.handoff, self.depth = collect, handoff, depth
        self.jobs: deque[Future] = deque()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="rollouts-ahead")
        self._group = new_thread_group()

    def _run(self) -> Step:
        version = self.handoff.apply_pending()
        with collectives_on(self._group):
            return self.collect(version)

    def fill(self, wanted: int) -> None:
        """Keep ``min(depth, wanted)`` batches submitted (``wanted``: batches the run still needs)."""
        while len(self.jobs) < min(self.depth, wanted):
            self.jobs.append(self._pool.submit(self._run))

    def take(self) -> Step | None:
        """The oldest batch in flight (waiting for it), or None when none is."""
        return self.jobs.popleft().result() if self.jobs else None

    def drain(self) -> list[Step]:
        """Wait for every batch in flight and load the newest weights: the engine then holds the
        trainer's current weights (validation, checkpoints). The batches stay queued, in order."""
        done = [job.result() for job in self.jobs]
        self.jobs = deque(_done(b) for b in done)
        self._pool.submit(self.handoff.apply_pending).result()
        return done

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)
        self.jobs.clear()


def _done(step: Step) -> Future:
    future: Future = Future()
    future.set_result(step)
    return future
