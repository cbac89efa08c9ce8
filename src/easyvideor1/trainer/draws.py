"""Drawing a step's prompts: the sampler's next global batch, this rank's share of it, its records
whose media do not load skipped (and listed), media loaded ahead while the previous step trained
(``prefetch.py``) used, and with ``data.preflight=fast`` its overlong prompts dropped.
"""

from __future__ import annotations

from ..data.dataset import MediaSample, encode_prompts
from ..errors import ConfigError
from ..models.inputs import PromptBatch
from .distributed import split_prompts
from .prefetch import MediaPrefetch
from .skipping import loadable_samples
from .state import Components, DataSkips, TrainData, TrainState


class PromptDraws:
    """This rank's prompts, step after step, from ``state``'s sampler over ``data``; the records
    left out are counted in ``skips``. ``prefetch``: load the next draw's media while a step
    trains (sync rollouts only: generating ahead draws on its own thread)."""

    def __init__(
        self, cfg, parts: Components, data: TrainData, skips: DataSkips, state: TrainState, prefetch: bool
    ):
        self.cfg, self.data, self.skips, self.state = cfg, data, skips, state
        self.processor, self.dist, self.skip_log = parts.processor, parts.dist, parts.skip_log
        self.prefetch = MediaPrefetch(data.train_set, cfg.data, parts.processor) if prefetch else None

    def next(self, draws: list[int] | None = None) -> tuple[list[MediaSample], PromptBatch]:
        """This rank's share of the next global batch (every rank draws it, so samplers stay in
        step), its unloadable records skipped and, with ``data.preflight=fast``, its overlong
        prompts dropped (both counted in ``self.skips``)."""
        data, dcfg = self.data, self.cfg.data
        drawn = self.state.sampler.next_batch()
        if draws is not None:
            draws += drawn
        chosen = [data.train_idx[i] for i in drawn]
        balance = self.cfg.distributed.balance_tokens
        chosen = split_prompts(chosen, self.dist, data.prompt_tokens if balance else None)
        ready = self.prefetch.take(chosen) if self.prefetch is not None else None
        samples = self.loadable(chosen, None if ready is None else ready.samples)
        if ready is not None and ready.batch is not None and _same(ready.encoded, samples):
            batch = ready.batch  # loaded and encoded while the previous step trained
        else:
            batch = encode_prompts(self.processor, samples, dcfg, data.train_set.loader)
        if self.prefetch is not None and self.state.step + 1 < self.cfg.trainer.max_steps:
            ahead = [data.train_idx[i] for i in self.state.sampler.peek_batch()]
            ahead = split_prompts(ahead, self.dist, data.prompt_tokens if balance else None)
            self.prefetch.start(ahead, self.skips.bad_prompts)
        if dcfg.preflight == "fast":  # lengths were not checked at start-up: check them here
            lengths = batch.inputs["attention_mask"].sum(1).tolist()
            fits = [s for s, n in zip(samples, lengths, strict=True) if n <= dcfg.max_prompt_length]
            self.skips.dropped_overlong += len(samples) - len(fits)
            if not fits:
                raise ConfigError(
                    f"every prompt of this step is longer than data.max_prompt_length="
                    f"{dcfg.max_prompt_length}, e.g. {samples[0].record.problem_id}"
                )
            if len(fits) < len(samples):
                samples = fits
                batch = encode_prompts(self.processor, samples, dcfg, data.train_set.loader)
        return samples, batch

    def loadable(self, chosen: list[int], ready: dict[int, MediaSample] | None = None) -> list[MediaSample]:
        """The samples of ``chosen`` whose media load; the others are skipped, listed and counted
        (``skipping.py``), and not drawn again. ``ready``: samples loaded ahead (prefetch.py)."""
        samples, rows = loadable_samples(
            self.data.train_set,
            self.cfg.data,
            chosen,
            self.skips.bad_prompts,
            self.state.step + 1,
            self.skip_log,
            ready,
        )
        self.skips.bad_prompts.update(row["index"] for row in rows)
        self.skips.skipped_at_step += len(rows)
        return samples

    def close(self) -> None:
        if self.prefetch is not None:
            self.prefetch.close()
            self.prefetch = None


def _same(a: list, b: list) -> bool:
    """Whether two lists hold the very same objects, in order."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))
