"""n seeded responses for one record, with evaluation's engines.

Reproducibility is per record, so that a resumed run samples exactly what an uninterrupted one
would: every record has its own seed, derived from the run's seed and its sample id, and never
shares a generate call with another record (a batch's random draws would depend on its
batch-mates, and those change when a run resumes).

* HF engine: one ``generate`` call per record with its ``n`` responses as the batch, after
  ``torch.manual_seed(record seed)``.
* vLLM engine (``AsyncLLM``): one request per record with ``n`` completions and
  ``seed=record seed`` (vLLM gives completion ``i`` the seed ``seed + i``); requests run
  concurrently and finish in any order. Greedy: one completion, repeated n times (vLLM refuses
  n > 1 without sampling).
"""

from __future__ import annotations

import hashlib
from concurrent.futures import Future
from dataclasses import dataclass

from ..rollout.base import Responses, SamplingConfig


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


def generate_hf(engine, prompts, n: int, sampling: SamplingConfig, seed: int) -> Sampled:
    """``n`` responses to one encoded prompt (a one-row ``PromptBatch``) with the HF engine."""
    import torch

    torch.manual_seed(seed)  # seeds every device's generator too
    return Sampled.of(engine.generate(prompts, [n], sampling))


def submit_vllm(
    engine, key: str, text: str, media: dict, n: int, sampling: SamplingConfig, seed: int
) -> Future:
    """Queue one record on an :class:`~easyvideor1.evaluation.engines.AsyncVLLMEvalEngine` (one
    request, ``n`` completions, the record's seed); the future gives its :class:`Sampled`."""
    out: Future = Future()

    def done(f: Future) -> None:
        try:
            out.set_result(Sampled.of(f.result()))
        except Exception as e:  # e.g. a prompt longer than the engine allows: the caller lists it
            out.set_exception(e)

    engine.submit(f"filter-{key}", text, media, sampling, n=n, seed=seed).add_done_callback(done)
    return out
