"""A deterministic, resumable order of prompts: one seeded permutation per epoch.

The state is two integers (epoch, position), saved with every checkpoint, so a resumed run sees
exactly the prompts the uninterrupted run would have (EasyR1#57 replayed data after resume).
"""

from __future__ import annotations

import torch


class PromptSampler:
    def __init__(self, size: int, batch_size: int, seed: int = 0, shuffle: bool = True):
        if size <= 0:
            raise ValueError("the training set is empty")
        if batch_size <= 0:
            raise ValueError(f"batch size must be positive, got {batch_size}")
        self.size, self.batch_size, self.seed, self.shuffle = size, batch_size, seed, shuffle
        self.epoch, self.position = 0, 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        if not self.shuffle:
            return list(range(self.size))
        g = torch.Generator().manual_seed(self.seed * 100_003 + epoch)
        return torch.randperm(self.size, generator=g).tolist()

    def next_batch(self) -> list[int]:
        """The next ``batch_size`` indices; an epoch boundary continues into the next permutation."""
        out: list[int] = []
        while len(out) < self.batch_size:
            if self.position >= self.size:
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._permutation(self.epoch)
            take = min(self.batch_size - len(out), self.size - self.position)
            out += self._order[self.position : self.position + take]
            self.position += take
        return out

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed, "size": self.size}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if state["size"] != self.size or state["seed"] != self.seed:
            raise ValueError(
                f"checkpoint was made for {state['size']} prompts with seed {state['seed']}, "
                f"this run has {self.size} with seed {self.seed}"
            )
        self.epoch, self.position = state["epoch"], state["position"]
        self._order = self._permutation(self.epoch)
