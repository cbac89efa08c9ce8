"""A vLLM ``AsyncLLM`` evaluation engine: one request per sample, many in flight.

The HF engine generates for batches of ready samples, so a batch waits for its slowest sample and
the loaders wait for the batch. Here each sample becomes its own request the moment its media is
loaded (``submit`` returns a future at once); vLLM's scheduler keeps as many running as memory
allows and finishes them in any order, and the pipeline writes each prediction when it finishes.
``AsyncLLM`` runs the engine core in its own process; its asyncio loop lives in a thread here, so
the pipeline stays plain synchronous code.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from concurrent.futures import Future
from typing import Any

from ..rollout.base import Responses, SamplingConfig
from ..rollout.vllm import VLLMResponses, engine_args, vllm_prompt


class AsyncVLLMEvalEngine(VLLMResponses):
    """Streaming evaluation engine (``easyvideor1 eval --engine vllm``).

    Parameters:
        model_path: Hugging Face model directory.
        processor: Its transformers processor (EOS ids, banned vision tokens, decoding).
        dtype: Weights and activations dtype (``float32``, ``bfloat16``, ``auto``).
        seed: Seed of the per-request sampling seeds (greedy decoding ignores it).
        max_model_len: Prompt + response token limit (default: the model's).
        gpu_memory_utilization: Share of GPU memory for weights + KV cache (GPU only).
        tensor_parallel_size: GPUs per engine; ``engine_kwargs={"data_parallel_size": k}`` runs k
            engine copies behind this one front end (vLLM balances requests over them).
        enforce_eager: Skip CUDA-graph capture (faster start, slower decoding).
        limit_mm_per_prompt: Max media per prompt, e.g. ``{"video": 1, "image": 4}``.
        engine_kwargs: Any other vLLM engine argument.
    """

    streaming = True  # the pipeline submits samples one by one instead of calling generate()

    def __init__(
        self,
        model_path: str,
        processor,
        *,
        dtype: str = "auto",
        seed: int = 0,
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.9,
        tensor_parallel_size: int = 1,
        enforce_eager: bool = False,
        limit_mm_per_prompt: dict[str, int] | None = None,
        engine_kwargs: dict[str, Any] | None = None,
    ):
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        super().__init__(model_path, processor, seed)
        kwargs = engine_args(
            model_path,
            processor,
            dtype=dtype,
            seed=seed,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel_size=tensor_parallel_size,
            enforce_eager=enforce_eager,
        )
        if limit_mm_per_prompt:
            kwargs["limit_mm_per_prompt"] = limit_mm_per_prompt
        kwargs.update(engine_kwargs or {})
        self._ids = itertools.count()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-async", daemon=True)
        self._thread.start()

        async def make() -> AsyncLLM:
            return AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))

        self.llm = asyncio.run_coroutine_threadsafe(make(), self._loop).result()

    def submit(
        self,
        key: str,
        text: str,
        media: dict[str, list],
        sampling: SamplingConfig,
        n: int = 1,
        seed: int | None = None,
    ) -> Future:
        """Queue one prompt; the future gives its :class:`Responses` when it finishes: ``n`` rows
        (completions in index order) from one request, sampled with ``seed`` when given (vLLM gives
        completion ``i`` the seed ``seed + i``). Greedy decoding makes one completion and repeats it
        (vLLM refuses ``n > 1`` without sampling; the n would all be the same answer)."""
        from vllm.sampling_params import RequestOutputKind

        greedy = sampling.temperature == 0
        params = self.sampling_params(sampling, n=1 if greedy else n)
        if seed is not None and not greedy:
            params.seed = seed
        params.output_kind = RequestOutputKind.FINAL_ONLY  # one output per request, no streaming
        request_id = f"{key}#{next(self._ids)}"
        prompt = vllm_prompt(text, media, self.mm_kwargs)
        copies = n if greedy else 1
        return asyncio.run_coroutine_threadsafe(self._run(request_id, prompt, params, copies), self._loop)

    async def _run(self, request_id: str, prompt: dict[str, Any], params, copies: int) -> Responses:
        final = None
        async for out in self.llm.generate(prompt, params, request_id):
            final = out
        got = 0 if final is None else len(final.outputs)
        if got != params.n:
            raise RuntimeError(f"vLLM returned {got} of {params.n} completions for request {request_id}")
        rows = [list(o.token_ids) for o in sorted(final.outputs, key=lambda o: o.index)]
        return self.responses(rows * copies, None)

    def close(self) -> None:
        """Shut the engine-core process down and stop the loop thread."""
        if getattr(self, "llm", None) is not None:
            handler = getattr(self.llm, "output_handler", None)
            if handler is not None:  # stop reading outputs first, or it reports the engine's exit as a crash
                asyncio.run_coroutine_threadsafe(_cancel(handler), self._loop).result(timeout=10)
            self.llm.shutdown()
            self.llm = None
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=10)


async def _cancel(task: asyncio.Task) -> None:
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass


def load_eval_engine(model: str, engine: str, dtype: str, **vllm_options: Any):
    """The engine ``easyvideor1 eval`` (and ``filter``) generates with, and the model's processor:
    HF ``generate`` in batches (``engine="hf"``), or vLLM ``AsyncLLM`` with one request per sample
    (``vllm_options``: :class:`AsyncVLLMEvalEngine`'s keyword arguments)."""
    if engine == "hf":
        import torch

        from ..models.loading import load_policy
        from ..rollout.hf import HFRolloutEngine

        policy, processor = load_policy(model, dtype=dtype)
        policy.to("cuda" if torch.cuda.is_available() else "cpu").eval()
        return HFRolloutEngine(policy, processor), processor
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(model)
    return AsyncVLLMEvalEngine(model, processor, dtype=dtype, **vllm_options), processor
