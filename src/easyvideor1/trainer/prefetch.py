"""The next draw's media, loaded while the current step trains (``data.prefetch``).

A video prompt's media (cache reads or decoding, then the processor) take seconds; loaded when
drawn, they stall the step. When a step draws its prompts, the trainer asks the sampler which
prompts come next (:meth:`~easyvideor1.trainer.sampler.PromptSampler.peek_batch`, which draws
nothing) and one worker thread loads them and encodes their batch. The next draw takes that work
when it draws exactly those prompts; otherwise (prompts given back, a record found bad in the
meantime) it is dropped and the draw loads as it always did. The prompts, their order, the skip
bookkeeping, the checkpointed sampler state and every tensor are those of a run without it: the
worker only computes, from the same records, what the draw would compute.

The worker runs its own copy of the processor: a fast tokenizer is not safe to call from two
threads at once, and the main thread encodes too (validation, dynamic sampling's kept prompts).
On a CUDA machine it also pins the batch's pixels, so their one copy to the device per step
(``models.inputs.to_device``) needs no host copy first. Only the sync rollout mode prefetches:
``one_step_off`` and ``async`` draw and load in their rollout thread, ahead of the step already.
"""

from __future__ import annotations

import copy
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from ..data.dataset import MediaSample, encode_prompts, load_media
from ..media.failures import MediaFailure
from ..models.inputs import PromptBatch, pin_pixels

THREAD_NAME = "media-prefetch"


@dataclass
class Ready:
    """What the worker loaded for a draw of ``chosen`` (this rank's dataset indices)."""

    chosen: list[int]
    samples: dict[int, MediaSample]  # index -> sample, media loaded (``loaded`` None: it failed)
    encoded: list[MediaSample]  # the loaded samples in draw order, as ``batch`` holds them
    batch: PromptBatch | None


class MediaPrefetch:
    """One draw loaded ahead by a single worker thread (:data:`THREAD_NAME`)."""

    def __init__(self, dataset, cfg, processor):
        self.dataset, self.cfg = dataset, cfg
        self.processor = copy.deepcopy(processor)  # the worker's own (see the module doc)
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=THREAD_NAME)
        self._pending: tuple[list[int], Future] | None = None

    def start(self, chosen: list[int], known_bad: set[int]) -> None:
        """Load ``chosen`` (but ``known_bad``) in the background; forgets an earlier draw's work."""
        self._pending = (list(chosen), self._pool.submit(self._load, list(chosen), set(known_bad)))

    def take(self, chosen: list[int]) -> Ready | None:
        """The work for ``chosen`` (waiting for it to finish), or None when none was started for
        exactly these prompts or it failed (the draw then does it itself, meeting any error in
        its usual place)."""
        pending, self._pending = self._pending, None
        if pending is None or pending[0] != list(chosen):
            return None
        try:
            return pending[1].result()
        except Exception:
            return None

    def _load(self, chosen: list[int], known_bad: set[int]) -> Ready:
        samples: dict[int, MediaSample] = {}
        for i in chosen:
            if i in known_bad:
                continue
            sample = self.dataset[i]
            try:
                sample.loaded = load_media(sample, self.cfg, self.dataset.loader)
            except MediaFailure:
                pass  # loaded again when drawn, and skipped or reported there
            samples[i] = sample
        encoded = [samples[i] for i in chosen if i in samples and samples[i].loaded is not None]
        batch = None
        if encoded:
            batch = pin_pixels(encode_prompts(self.processor, encoded, self.cfg, self.dataset.loader))
        return Ready(list(chosen), samples, encoded, batch)

    def close(self) -> None:
        self._pending = None
        self._pool.shutdown(wait=True, cancel_futures=True)
