"""Start-up checks: fail before step 1 on what would otherwise fail mid-run.

Unknown reward tasks, and prompts longer than ``data.max_prompt_length`` after media expansion
(dropped and counted, instead of the mid-run "features and tokens do not match" crash). Records
whose media cannot be loaded (missing or corrupt files, no cache entry in ``cache_only`` mode) are
skipped and listed (``trainer/skipping.py``), or stop the run with ``data.strict=true``. Under torchrun the ranks check disjoint blocks and share
what they found, so every rank gets the same prompt list, and a problem found by any rank stops
every rank with the same message (instead of one rank raising while the others wait in a collective).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..data.dataset import RecordDataset, encode_prompts
from ..errors import UserError
from ..rewards import validate_problem_types
from .distributed import DistState, all_gather
from .skipping import media_problem, skip_row, strict_error, unreadable_row

BLOCK = 32  # prompts encoded together per check


def preflight(
    dataset: RecordDataset | None,
    split: str,
    cfg,
    processor,
    state: DistState,
    write: Callable[[str], None] = print,
    max_count: int | None = None,
) -> tuple[list[int], dict[int, int], list[dict[str, Any]]]:
    """(indices of the prompts that fit, their token counts, skipped-record rows); the first
    ``max_count`` prompts when given.

    A record whose media cannot be loaded, or whose text could not be read when the dataset was
    loaded, is skipped (a row of ``skipped_records.jsonl``) unless ``data.strict``; every rank gets
    the same three results.
    """
    if dataset is None:
        return [], {}, []
    validate_problem_types({r.problem_type for r in dataset.records}, cfg.reward)
    # every rank read the same files, so every rank lists the same unreadable records here
    skipped = [unreadable_row(e, split) for _, e in dataset.unreadable]
    if skipped and cfg.data.strict:
        raise strict_error(skipped[0])
    keep, lengths, dropped, start = [], {}, 0, 0
    encode = cfg.data.preflight == "full" or split != "train"  # validation sets are small: always
    while start < len(dataset) and (max_count is None or len(keep) < max_count):
        lo = start + state.data_rank * BLOCK
        mine = list(range(lo, min(lo + BLOCK, len(dataset))))
        found = _check_block(dataset, split, mine, cfg, processor, not state.enabled, encode)
        for r, (k, n, d, s, error) in enumerate(all_gather(found)):
            if error:  # every rank sees the same list, so every rank stops here
                raise UserError(f"preflight failed on rank {r}: {error}")  # the CLI prints it plainly
            keep += k
            lengths.update(zip(k, n, strict=True))
            dropped += d
            skipped += s
        start += BLOCK * state.data_world
    keep = keep[:max_count] if max_count is not None else keep
    limit = cfg.data.max_prompt_length
    write(
        f"preflight {split}: {len(keep)} prompts kept, {dropped} dropped as longer than "
        f"data.max_prompt_length={limit} tokens"
        + (
            f", {len(skipped)} skipped as their media or text cannot be read (see skipped_records.jsonl)"
            if skipped
            else ""
        )
        + ("" if encode else " (lengths not checked: data.preflight=fast)")
    )
    if not keep:
        if skipped and not dropped:
            first = skipped[0]
            raise UserError(
                f"{split}: no record can be used: the media of all {len(skipped)} could not be loaded, "
                f"e.g. {first['source']}: {first['reason']}"
            )
        raise UserError(f"{split}: no prompt fits data.max_prompt_length={limit}")
    return keep, {int(i): int(n) for i, n in lengths.items()}, skipped


def _check_block(
    dataset: RecordDataset, split: str, idx: list[int], cfg, processor, raise_here: bool, encode: bool = True
):
    """(kept indices, their token counts, dropped count, skipped rows, error message or None)."""
    if not idx:
        return [], [], 0, [], None
    try:
        good, skipped = [], []
        for i in idx:
            sample = dataset[i]
            reason = media_problem(sample, cfg.data, dataset.loader, load=encode)
            if reason is None:
                good.append((i, sample))
                continue
            row = skip_row(sample, i, reason, split, "preflight", 0)
            if cfg.data.strict:
                raise strict_error(row)
            skipped.append(row)
        if not encode or not good:
            return [i for i, _ in good], [0] * len(good), 0, skipped, None
        samples = [s for _, s in good]
        batch = encode_prompts(processor, samples, dataset.cfg, dataset.loader)
        for s in samples:
            s.loaded = None  # the frames were only needed for the lengths
    except Exception as e:
        if raise_here:
            raise
        return [], [], 0, [], f"{type(e).__name__}: {e}"
    limit = cfg.data.max_prompt_length
    counts = batch.inputs["attention_mask"].sum(1).tolist()
    kept = [(i, n) for (i, _), n in zip(good, counts, strict=True) if n <= limit]
    return [i for i, _ in kept], [n for _, n in kept], len(good) - len(kept), skipped, None
