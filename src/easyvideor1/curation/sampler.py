"""n seeded responses for one record, with evaluation's engines.

Reproducibility is per record, so that a resumed run samples exactly what an uninterrupted one
would: every record has its own seed, derived from the run's seed and its sample id, and never
shares a generate call with another record (a batch's random draws would depend on its
batch-mates, and those change when a run resumes).

Each record is one engine :class:`~easyvideor1.rollout.base.Request` with ``n`` and
``seed=record seed``; a seeded request is never batched with another (``rollout/base.py``):

* HF engine: one ``generate`` call for the record's ``n`` responses after
  ``torch.manual_seed(record seed)``.
* vLLM engine (``AsyncLLM``): one request with ``n`` completions and that seed (vLLM gives
  completion ``i`` the seed ``seed + i``); requests run concurrently and finish in any order.
  Greedy: one completion, repeated n times (vLLM refuses n > 1 without sampling).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..rollout.base import Responses


@dataclass
class Sampled:
    """One record's responses: texts, token counts, and whether each hit the token limit."""

    texts: list[str]
    tokens: list[int]
    truncated: list[bool]

    @classmethod
    def of(cls, out: Responses) -> Sampled:
        n = len(out.texts)
        return cls(
            list(out.texts), [int(x) for x in out.mask.sum(1).tolist()], list(out.truncated or [False] * n)
        )


def record_seed(seed: int, sample_id: str) -> int:
    """A 31-bit seed for one record (vLLM adds the completion index, so leave it headroom)."""
    digest = hashlib.sha256(f"{seed}\0{sample_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") >> 2
