"""A deterministic, resumable order of prompts: one seeded permutation per epoch.

The state is two integers (epoch, position), saved with every checkpoint, so a resumed run sees
exactly the prompts the uninterrupted run would have (EasyR1#57 replayed data after resume), plus
the prompts given back (:meth:`PromptSampler.requeue`: drawn, never trained), which are drawn
again before the permutation goes on. Rollouts generated ahead draw from another thread: a lock
keeps each call whole.
"""

from __future__ import annotations

import threading

import torch

from ..errors import UserError


class PromptSampler:
    def __init__(self, size: int, batch_size: int, seed: int = 0, shuffle: bool = True):
        if size <= 0:
            raise UserError("the training set is empty")
        if batch_size <= 0:
            raise ValueError(f"batch size must be positive, got {batch_size}")
        self.size, self.batch_size, self.seed, self.shuffle = size, batch_size, seed, shuffle
        self.epoch, self.position = 0, 0
        self.requeued: list[int] = []
        self._order = self._permutation(0)
        self._lock = threading.Lock()

    def _permutation(self, epoch: int) -> list[int]:
        if not self.shuffle:
            return list(range(self.size))
        g = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
        return torch.randperm(self.size, generator=g).tolist()

    def next_batch(self) -> list[int]:
        """The next ``batch_size`` indices, given-back ones first; an epoch boundary continues into
        the next permutation."""
        with self._lock:
            out = self.requeued[: self.batch_size]
            del self.requeued[: self.batch_size]
            return self._draw(out)

    def peek_batch(self) -> list[int]:
        """What :meth:`next_batch` would give now, drawing nothing (the state a checkpoint saves is
        unchanged): what to load ahead."""
        with self._lock:
            saved = (self.epoch, self.position, self._order)
            out = self._draw(self.requeued[: self.batch_size])
            self.epoch, self.position, self._order = saved
            return out

    def requeue(self, indices: list[int], front: bool = False) -> None:
        """Give drawn prompts back (rollouts dropped as too stale, or generated ahead of a
        checkpoint): they are drawn again, in order, before any new one; ``front`` puts them
        before those already given back."""
        with self._lock:
            self.requeued = list(indices) + self.requeued if front else self.requeued + list(indices)

    def _draw(self, out: list[int]) -> list[int]:
        while len(out) < self.batch_size:
            if self.position >= self.size:
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._permutation(self.epoch)
            take = min(self.batch_size - len(out), self.size - self.position)
            out += self._order[self.position : self.position + take]
            self.position += take
        return out

    def state_dict(self) -> dict:
        with self._lock:
            state = {"epoch": self.epoch, "position": self.position, "seed": self.seed, "size": self.size}
            if self.requeued:
                state["requeued"] = list(self.requeued)
            return state

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state["size"] != self.size or state["seed"] != self.seed:
            raise UserError(
                f"checkpoint was made for {state['size']} prompts with seed {state['seed']}, "
                f"this run has {self.size} with seed {self.seed}"
            )
        self.epoch, self.position = state["epoch"], state["position"]
        self.requeued = [int(i) for i in state.get("requeued", [])]
        self._order = self._permutation(self.epoch)
