"""Start-up checks: fail before step 1 on what would otherwise fail mid-run.

Unknown reward tasks, missing cache entries (``cache_only``), unreadable media, and prompts longer
than ``data.max_prompt_length`` after media expansion (dropped and counted, instead of the mid-run
"features and tokens do not match" crash). Under torchrun the ranks check disjoint blocks and share
what they found, so every rank gets the same prompt list, and a problem found by any rank stops
every rank with the same message (instead of one rank raising while the others wait in a collective).
"""

from __future__ import annotations

from collections.abc import Callable

from ..data.dataset import RecordDataset, encode_prompts
from ..media.cache import CacheError
from ..rewards import validate_problem_types
from .distributed import DistState, all_gather

BLOCK = 32  # prompts encoded together per check


def preflight(
    dataset: RecordDataset | None,
    split: str,
    cfg,
    processor,
    state: DistState,
    write: Callable[[str], None] = print,
    max_count: int | None = None,
) -> tuple[list[int], dict[int, int]]:
    """(indices of the prompts that fit, their token counts); the first ``max_count`` when given."""
    if dataset is None:
        return [], {}
    validate_problem_types({r.problem_type for r in dataset.records}, cfg.reward)
    keep, lengths, dropped, start = [], {}, 0, 0
    encode = cfg.data.preflight == "full" or split != "train"  # validation sets are small: always
    while start < len(dataset) and (max_count is None or len(keep) < max_count):
        lo = start + state.rank * BLOCK
        mine = list(range(lo, min(lo + BLOCK, len(dataset))))
        found = _check_block(dataset, split, mine, cfg, processor, not state.enabled, encode)
        for r, (k, n, d, error) in enumerate(all_gather(found)):
            if error:  # every rank sees the same list, so every rank stops here
                raise RuntimeError(f"preflight failed on rank {r}: {error}")
            keep += k
            lengths.update(zip(k, n, strict=True))
            dropped += d
        start += BLOCK * state.world
    keep = keep[:max_count] if max_count is not None else keep
    limit = cfg.data.max_prompt_length
    write(
        f"preflight {split}: {len(keep)} prompts kept, {dropped} dropped as longer than "
        f"data.max_prompt_length={limit} tokens"
        + ("" if encode else " (lengths not checked: data.preflight=fast)")
    )
    if not keep:
        raise ValueError(f"{split}: no prompt fits data.max_prompt_length={limit}")
    return keep, {int(i): int(n) for i, n in lengths.items()}


def _check_block(
    dataset: RecordDataset, split: str, idx: list[int], cfg, processor, raise_here: bool, encode: bool = True
):
    """(kept indices, their token counts, dropped count, error message or None) for one block."""
    if not idx:
        return [], [], 0, None
    try:
        samples = [dataset[i] for i in idx]
        if cfg.data.cache_mode == "cache_only":
            missing = [s.videos[j] for s in samples for j, e in enumerate(s.video_entries) if e is None]
            if missing:
                raise CacheError(
                    f"{split}: {len(missing)} video(s) have no cache entry, e.g. {missing[0]} "
                    "(cache_only mode; run `easyvideor1 preprocess` with the same settings)"
                )
        if not encode:
            return idx, [0] * len(idx), 0, None
        batch = encode_prompts(processor, samples, dataset.cfg, dataset.loader)
    except Exception as e:
        if raise_here:
            raise
        return [], [], 0, f"{type(e).__name__}: {e}"
    limit = cfg.data.max_prompt_length
    counts = batch.inputs["attention_mask"].sum(1).tolist()
    kept = [(i, n) for i, n in zip(idx, counts, strict=True) if n <= limit]
    return [i for i, _ in kept], [n for _, n in kept], len(idx) - len(kept), None
