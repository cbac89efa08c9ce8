"""A vLLM ``AsyncLLM`` engine: one request per sample, many in flight (``eval``, ``filter``).

Batch engines make a batch wait for its slowest sample and the loaders wait for the batch. Here each
request goes to vLLM the moment it is submitted (``submit`` returns a future at once); vLLM's
scheduler keeps as many running as memory allows and finishes them in any order. ``AsyncLLM``
runs the engine core in its own process; its asyncio loop lives in a thread here, so callers stay
plain synchronous code. Engine arguments come from ``rollout.vllm`` through the same
:func:`~.vllm.engine_args` as the training engine.

An episode request (``Request.episode_tools``) runs in a thread of its own: each of its turns is
one vLLM request, so the episodes of every sample in flight share the scheduler, and a sample
waiting on its tools holds no slot.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..models.inputs import PromptBatch
from .base import Request, Responses, SamplingConfig
from .config import VLLMConfig
from .vllm_shared import GroupRequest, VLLMResponses, engine_args


class AsyncVLLMEngine(VLLMResponses):
    """Request-level vLLM engine (``--engine vllm`` of ``eval`` and ``filter``).

    Parameters:
        model_path: Hugging Face model directory.
        processor: Its transformers processor (EOS ids, banned vision tokens, decoding).
        cfg: The ``rollout.vllm`` section (memory share, parallelism, eager mode, length limit,
            the KV-cache size on CPUs).
        dtype: Weights and activations dtype (``float32``, ``bfloat16``, ``auto``).
        seed: Seed of the per-request sampling seeds (greedy decoding ignores it).
        engine_kwargs: Any other vLLM engine argument.
    """

    owns_weights = False  # serves a checkpoint; nothing is pushed to it
    adapter_sync = False
    weight_dtype = None  # serves a checkpoint: nothing is pushed
    runs_episodes = True
    max_episodes = 64  # episode requests running at once (threads waiting on vLLM or on their tools)

    def __init__(
        self,
        model_path: str,
        processor,
        cfg: VLLMConfig | None = None,
        *,
        dtype: str = "auto",
        seed: int = 0,
        engine_kwargs: dict[str, Any] | None = None,
    ):
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        cfg = cfg or VLLMConfig()
        super().__init__(model_path, processor, seed)
        kwargs = engine_args(
            model_path,
            processor,
            dtype=dtype,
            seed=seed,
            max_model_len=cfg.max_model_len or None,
            gpu_memory_utilization=cfg.memory_share(colocated=False),
            tensor_parallel_size=cfg.tensor_parallel_size,
            data_parallel_size=cfg.data_parallel_size,
            enforce_eager=cfg.enforce_eager,
            cpu_kv_cache_gib=cfg.cpu_kv_cache_gib,
        )
        kwargs.update(engine_kwargs or {})
        self._ids = itertools.count()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-async", daemon=True)
        self._thread.start()

        async def make() -> AsyncLLM:
            return AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))

        self.llm = asyncio.run_coroutine_threadsafe(make(), self._loop).result()
        self._episodes: ThreadPoolExecutor | None = None  # started with the first episode request

    def submit(self, request: Request) -> Future:
        """Queue one request; the future gives its :class:`Responses`: ``n`` rows (completions in
        index order) from one vLLM request, sampled with ``request.seed`` when given (vLLM gives
        completion ``i`` the seed ``seed + i``). Greedy decoding makes one completion and repeats it
        (vLLM refuses ``n > 1`` without sampling; the n would all be the same answer)."""
        from .base import request_media

        if request.episode_tools is not None:
            from .episode import request_episodes

            if self._episodes is None:
                self._episodes = ThreadPoolExecutor(self.max_episodes, thread_name_prefix="vllm-episode")
            return self._episodes.submit(
                request_episodes, self, self.processor, request, self.family.model_type
            )
        prompt = self.prompt(request.prompt.text, request_media(request.prompt))
        return self._submit(request.key, prompt, request.sampling, request.n, request.seed)

    def _submit(self, key: str, prompt: dict[str, Any], sampling: SamplingConfig, n: int, seed) -> Future:
        from vllm.sampling_params import RequestOutputKind

        group = self.group_request(prompt, sampling, n, seed)
        group.params.output_kind = RequestOutputKind.FINAL_ONLY  # one output per request, no streaming
        request_id = f"{key}#{next(self._ids)}"
        return asyncio.run_coroutine_threadsafe(self._run(request_id, group), self._loop)

    def generate(self, batch: PromptBatch, repeats: list[int], sampling: SamplingConfig) -> Responses:
        """The batch path on top of :meth:`submit`: every prompt in flight at once, rows in order
        (an episode's turns come this way, as token ids)."""
        if sampling.return_logprobs:
            raise ValueError("the AsyncLLM engine returns no log-probs: use the training engine")
        prompts = self.batch_prompts(batch)
        futures = [
            self._submit(f"batch-{i}", prompt, sampling, r, None)
            for i, (prompt, r) in enumerate(zip(prompts, repeats, strict=True))
            if r
        ]
        outs = [f.result() for f in futures]
        rows = [row[m.bool()].tolist() for out in outs for row, m in zip(out.ids, out.mask, strict=True)]
        if not rows:
            import torch

            empty = torch.zeros((0, 0), dtype=torch.long)
            return Responses(ids=empty, mask=empty, texts=[], truncated=[])
        return self.responses(rows, None)

    async def _run(self, request_id: str, group: GroupRequest) -> Responses:
        final = None
        async for out in self.llm.generate(group.prompt, group.params, request_id):
            final = out
        if final is None:
            raise RuntimeError(f"vLLM returned no output for request {request_id}")
        return self.responses(group.rows(final)[0], None)

    def update_weights(self, named_tensors) -> None:
        raise RuntimeError("the AsyncLLM engine serves a checkpoint: weights are not pushed to it")

    def update_adapter(self, adapter_dir: str) -> None:
        raise RuntimeError("the AsyncLLM engine serves a checkpoint: adapters are not pushed to it")

    def sleep(self, level: int = 1) -> None:
        """Nothing to release between phases: no trainer shares this engine's GPU."""

    def wake_up(self, tags: list[str] | None = None) -> None:
        """See :meth:`sleep`."""

    def close(self) -> None:
        """Shut the engine-core process down and stop the loop thread."""
        if getattr(self, "_episodes", None) is not None:
            self._episodes.shutdown(wait=True, cancel_futures=True)
            self._episodes = None
        if getattr(self, "llm", None) is not None:
            handler = getattr(self.llm, "output_handler", None)  # a vLLM internal, absent in some versions
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
