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

import asyncio
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
    """Queue one record on an :class:`~easyvideor1.evaluation.engines.AsyncVLLMEvalEngine`; the
    future gives its :class:`Sampled` (completions in index order)."""
    from vllm.sampling_params import RequestOutputKind

    from ..rollout.vllm import vllm_prompt

    greedy = sampling.temperature == 0
    # vLLM refuses n > 1 with greedy decoding; its n completions would all be the one greedy answer
    params = engine.sampling_params(sampling, n=1 if greedy else n)
    if not greedy:
        params.seed = seed
    params.output_kind = RequestOutputKind.FINAL_ONLY  # all n completions in one output
    prompt = vllm_prompt(text, media, engine.mm_kwargs)
    copies = n if greedy else 1
    return asyncio.run_coroutine_threadsafe(
        _run(engine, f"filter-{key}", prompt, params, copies), engine._loop
    )


async def _run(engine, request_id: str, prompt: dict, params, copies: int) -> Sampled:
    final = None
    async for out in engine.llm.generate(prompt, params, request_id):
        final = out
    if final is None or len(final.outputs) != params.n:
        got = 0 if final is None else len(final.outputs)
        raise RuntimeError(f"vLLM returned {got} of {params.n} completions for {request_id}")
    rows = [list(o.token_ids) for o in sorted(final.outputs, key=lambda o: o.index)] * copies
    return Sampled.of(engine.responses(rows, None))
