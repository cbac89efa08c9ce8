"""Rollouts with vLLM behind the same interface as :class:`~easyvideor1.rollout.hf.HFRolloutEngine`.

vLLM runs its own processor, so it takes each prompt's rendered text and raw media
(``PromptBatch.texts`` / ``PromptBatch.media``, filled by ``encode_prompts``) instead of processor
tensors. Frames arrive already sampled and resized, with ``do_sample_frames=False`` and the source
fps and frame indices in their metadata, and ``do_resize=False`` goes with every request: vLLM then
builds exactly the prompt token ids transformers builds (``tests/rollout/test_vllm_engine.py``).

Responses follow the HF engine's contract: ids cut after the first end-of-turn token and
right-padded, mask including that token, ``truncated`` for rows without it, vision placeholder
tokens never sampled (vLLM ``bad_words``; each is a single special token), and optional log-probs
of the sampled tokens under the distribution they were sampled from (``logprobs_mode=
"processed_logprobs"``: after banning, temperature and top-k/top-p, like HF's ``scores``).

New policy weights go in layer by layer (vLLM's in-place ``reload_weights``, which also handles
fused and repacked kernels) through a small worker extension, after which the prefix and encoder
caches are dropped: both hold values computed with the old weights (a repeated video would
otherwise reuse stale vision embeddings). vLLM's multimodal processor cache is dropped too: it
holds preprocessed pixels keyed by a hash of the media and processor settings, which the weights
do not change, but a training step's media seldom return in later steps, and kept it would fill
up to ``mm_processor_cache_gb`` (4 GiB by default) of host memory per engine; within a step it
still serves an episode's later turns, which repeat the prompt's media.

With ``max_lora_rank`` the engine runs vLLM's LoRA support instead (``enable_lora``): the trainer
sends only its adapter, as a PEFT directory, through :meth:`VLLMRolloutEngine.update_adapter`, and
every request runs with the newest one. Each update registers the adapter under a new id and drops
the previous one, so no cached prefix computed with an old adapter can be reused.
"""

from __future__ import annotations

import gc
import logging
import os
import random
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from ..errors import ConfigError
from ..models.inputs import PromptBatch
from .base import Request, RequestQueue, Responses, SamplingConfig, request_media
from .config import VLLMConfig
from .vllm_shared import VLLMResponses, engine_args, vllm_prompt

log = logging.getLogger(__name__)

_EXTENSION = "easyvideor1.rollout.vllm.WeightSyncExtension"


class WeightSyncExtension:
    """Mixed into every vLLM worker (``worker_extension_cls``) so that weights can be pushed by a
    method name: no pickled callables, so no ``VLLM_ALLOW_INSECURE_SERIALIZATION`` needed."""

    def evr1_load_weights(self, payload: bytes | Iterable[tuple[str, torch.Tensor]]) -> None:
        """Reload weights in place from safetensors bytes (multiprocess) or (name, tensor) pairs.

        ``reload_weights`` with ``is_checkpoint_format=True`` takes transformers parameter names
        and re-runs vLLM's post-load processing (the CPU backend repacks linear weights, so
        copying into parameters directly would be wrong).
        """
        if isinstance(payload, (bytes, bytearray, memoryview)):
            from safetensors.torch import load

            payload = load(bytes(payload)).items()
        self.reload_weights(weights_iterator=iter(payload), is_checkpoint_format=True)  # type: ignore[attr-defined]


def safetensors_bytes(named_tensors: Iterable[tuple[str, torch.Tensor]]) -> bytes:
    """Weights as one safetensors blob (CPU copies; tensors sharing storage are cloned)."""
    from safetensors.torch import save

    out: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, t in named_tensors:
        t = t.detach().to("cpu").contiguous()
        if t.data_ptr() in seen:  # tied weights: safetensors refuses shared storage
            t = t.clone()
        seen.add(t.data_ptr())
        out[name] = t
    return save(out)


class VLLMRolloutEngine(RequestQueue, VLLMResponses):
    """A vLLM ``LLM`` as a rollout engine (``generate`` / ``submit`` / ``update_weights`` / ``sleep``
    / ``close``); ``submit`` batches the waiting requests into one ``LLM.generate`` call.

    Parameters:
        model_path: Hugging Face model directory (config, safetensors, tokenizer, processor files).
        processor: The transformers processor of that model; its tokenizer decodes responses and
            names the banned vision tokens.
        dtype: ``"auto"`` (the checkpoint's), ``"float32"``, ``"bfloat16"``, ...; use the trainer's
            dtype, or sampled and recomputed log-probs drift apart.
        seed: Engine seed; each request gets a seed drawn from a generator seeded with it, so the
            same calls in the same order give the same samples.
        max_model_len: Prompt + response token limit (default: the model's).
        gpu_memory_utilization: Share of GPU memory vLLM may take (weights + KV cache); leave the
            trainer room when colocated. Ignored on CPU (``cpu_kv_cache_gib`` there).
        cpu_kv_cache_gib: On CPUs, the KV cache's size in GiB or ``"auto"`` (sized from the
            available memory and the ranks on this machine; ``rollout/cpu_kv_cache.py``).
        tensor_parallel_size: GPUs per engine (> 1 needs ``in_process=False``).
        enforce_eager: Skip CUDA-graph capture / compilation (faster start, slower decoding).
        in_process: Run engine core and worker in this process (sets ``VLLM_ENABLE_V1_MULTIPROCESSING=0``
            for the process; starts in seconds, weights pass by reference). Otherwise vLLM's
            default worker processes (weights travel as safetensors bytes). vLLM seeds the global
            RNGs while it starts; the caller's states are restored.
        executor: Override ``distributed_executor_backend``. By default an in-process engine uses
            ``"uni"`` alone and, under torchrun, ``"external_launcher"``: the one executor that
            takes the rank's device from ``LOCAL_RANK`` (``"uni"`` would take device 0 on every
            rank and move the rank's current device there). Each rank's engine is then one full
            copy that samples its own prompts (tensor parallel 1); it joins the trainer's
            process group and leaves it intact on close.
        enable_prefix_caching: Share KV of common prefixes (the ``n`` samples of a prompt).
        enable_sleep_mode: Allow :meth:`sleep` (GPU only; ignored elsewhere).
        limit_mm_per_prompt: Max media per prompt, e.g. ``{"video": 2, "image": 4}``.
        weight_transport: ``"auto"`` (references in process, bytes otherwise) or ``"bytes"``.
        max_lora_rank: > 0 enables vLLM's LoRA (adapter-only updates through
            :meth:`update_adapter`); vLLM accepts ranks 1, 8, 16, 32, ..., so the next one up is used.
        engine_kwargs: Any other ``vllm.LLM`` argument, passed as is.
    """

    def __init__(
        self,
        model_path: str,
        processor,
        *,
        dtype: str = "auto",
        seed: int = 0,
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.5,
        cpu_kv_cache_gib: float | str = "auto",
        tensor_parallel_size: int = 1,
        enforce_eager: bool = False,
        in_process: bool = True,
        executor: str | None = None,
        enable_prefix_caching: bool = True,
        enable_sleep_mode: bool = False,
        limit_mm_per_prompt: dict[str, int] | None = None,
        weight_transport: str = "auto",
        max_lora_rank: int = 0,
        engine_kwargs: dict[str, Any] | None = None,
    ):
        if weight_transport not in ("auto", "bytes"):
            raise ValueError(f"weight_transport must be 'auto' or 'bytes', got {weight_transport!r}")
        if in_process and tensor_parallel_size > 1 and executor is None:
            raise ConfigError(
                "rollout.vllm.tensor_parallel_size > 1 needs rollout.vllm.in_process=false (or executor=...)"
            )
        if executor is None and in_process:
            executor = "external_launcher" if _torch_distributed_ready() else "uni"
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if in_process else "1"
        from vllm import LLM
        from vllm.platforms import current_platform

        super().__init__(model_path, processor, seed)
        self.owns_weights = True  # its own copy: the trainer pushes weights after every update
        self.runs_episodes = True  # episodes go in as token ids (PromptBatch.token_prompts)
        self.in_process, self.weight_transport = in_process, weight_transport
        self._sleep_ok = enable_sleep_mode and current_platform.is_sleep_mode_available()
        if enable_sleep_mode and not self._sleep_ok:
            log.info("vLLM sleep mode is not available on %s: sleep()/wake_up() do nothing", current_platform)
        kwargs = engine_args(
            model_path,
            processor,
            dtype=dtype,
            seed=seed,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            cpu_kv_cache_gib=cpu_kv_cache_gib,
            tensor_parallel_size=tensor_parallel_size,
            enforce_eager=enforce_eager,
            enable_prefix_caching=enable_prefix_caching,
            enable_sleep_mode=self._sleep_ok,
            distributed_executor_backend=executor,
            worker_extension_cls=_EXTENSION,
            logprobs_mode="processed_logprobs",
        )
        if limit_mm_per_prompt:
            kwargs["limit_mm_per_prompt"] = dict(limit_mm_per_prompt)
            if self.family.engine.vllm_max_videos is not None and "video" in limit_mm_per_prompt:
                # more than the model's implementation takes fails vLLM's start-up: ask for its most
                kwargs["limit_mm_per_prompt"]["video"] = min(
                    limit_mm_per_prompt["video"], self.family.engine.vllm_max_videos
                )
        self.adapter_sync = max_lora_rank > 0  # RolloutEngine.adapter_sync
        self._adapter = None  # the LoRARequest every request carries, once an adapter was sent
        if self.adapter_sync:
            kwargs.update(enable_lora=True, max_lora_rank=_vllm_lora_rank(max_lora_rank), max_loras=1)
        kwargs.update(engine_kwargs or {})
        if in_process and _torch_distributed_ready():
            _keep_callers_process_group()
        device = _current_device()
        with _global_rng_kept():  # vLLM reseeds random/numpy/torch: the trainer's streams must not move
            self.llm = LLM(**kwargs)
        self.executor = executor or "multiprocess"
        self.weight_dtype = self.llm.llm_engine.model_config.dtype  # pushed weights are cast to it
        _check_device_kept(device, self.executor)
        # one line per rank at start-up, on stderr like the thread choice: where each engine runs
        rank = os.environ.get("RANK", "0")
        print(
            f"rank {rank}: vLLM engine on {device} with the {self.executor} executor, weights in {self.weight_dtype}",
            file=sys.stderr,
            flush=True,
        )

    @classmethod
    def from_config(
        cls, model_path: str, processor, cfg: VLLMConfig, *, seed: int, colocated: bool, **kwargs
    ) -> VLLMRolloutEngine:
        """The engine ``rollout.vllm`` describes (``colocated``: it shares the GPU with a trainer)."""
        return cls(
            model_path,
            processor,
            dtype=cfg.dtype,
            seed=seed,
            max_model_len=cfg.max_model_len or None,
            gpu_memory_utilization=cfg.memory_share(colocated),
            cpu_kv_cache_gib=cfg.cpu_kv_cache_gib,
            tensor_parallel_size=cfg.tensor_parallel_size,
            enforce_eager=cfg.enforce_eager,
            in_process=cfg.in_process,
            enable_sleep_mode=cfg.sleep_between_phases,
            **kwargs,
        )

    def generate(self, batch: PromptBatch, repeats: list[int], sampling: SamplingConfig) -> Responses:
        """Sample ``repeats[i]`` responses for prompt ``i``, in prompt order (see the module doc)."""
        if len(repeats) != len(batch):
            raise ValueError(f"{len(repeats)} repeat counts for {len(batch)} prompts")
        if sum(repeats) == 0:
            empty = torch.zeros((0, 0), dtype=torch.long)
            return Responses(ids=empty, mask=empty, texts=[], truncated=[])
        prompts = self.batch_prompts(batch)
        return self._sample(prompts, repeats, [sampling] * len(prompts), [None] * len(prompts))

    def generate_episodes(
        self, batch: PromptBatch, repeats: list[int], sampling: SamplingConfig, episode_tools: list
    ) -> Responses:
        """:meth:`generate` with every response an episode (``episode_tools[p]()``: prompt ``p``'s
        tools): each round, every unfinished episode's next turn is in one ``LLM.generate``."""
        from .episode import run_batch_episodes

        return run_batch_episodes(
            self, self.processor, batch, repeats, sampling, self.family.model_type, episode_tools
        )

    def run_batch(self, requests: list[Request]) -> list[Responses]:
        """The request path: every waiting request in one ``LLM.generate`` call (an episode request
        alone: its ``n`` episodes advance together)."""
        from .base import split_responses
        from .episode import request_episodes

        if requests[0].episode_tools is not None:  # alone in its batch (RequestQueue)
            return [request_episodes(self, self.processor, requests[0], self.family.model_type)]
        prompts = [self.prompt(r.prompt.text, request_media(r.prompt)) for r in requests]
        counts = [r.n for r in requests]
        out = self._sample(prompts, counts, [r.sampling for r in requests], [r.seed for r in requests])
        return split_responses(out, counts)

    def _sample(self, prompts: list[dict], repeats: list[int], samplings: list, seeds: list) -> Responses:
        groups = [
            self.group_request(prompt, sampling, r, seed)
            for prompt, r, sampling, seed in zip(prompts, repeats, samplings, seeds, strict=True)
            if r
        ]
        outs = self.llm.generate(
            [g.prompt for g in groups], [g.params for g in groups], use_tqdm=False, lora_request=self._adapter
        )
        rows, logprobs = [], []
        for group, out in zip(groups, outs, strict=True):
            ids, lps = group.rows(out)
            rows += ids
            logprobs += lps
        return self.responses(rows, logprobs if any(s.return_logprobs for s in samplings) else None)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load new policy weights, then drop the prefix, encoder and processor caches.

        ``named_tensors`` yields ``(name, tensor)`` with transformers parameter names (as in the HF
        model's ``state_dict()``), full (unsharded) tensors, any device and dtype (cast on load).
        In process the iterable is consumed lazily inside the worker, so a trainer can gather one
        layer at a time; with worker processes it is serialised into one safetensors blob first
        (peak host memory: one copy of the weights). Send every weight of a layer in the same call:
        vLLM fuses some (q/k/v, gate/up) and processes a layer once all its parts arrived.
        """
        if self.family.engine.vllm_weight_push:
            raise RuntimeError(
                f"cannot push weights to vLLM's {self.family.model_type}: {self.family.engine.vllm_weight_push}"
            )
        named_tensors = self.family.engine.checkpoint_tensors(named_tensors)  # vLLM reads the released layout
        named_tensors = _cast_floating(named_tensors, self.weight_dtype)
        if self.in_process and self.weight_transport == "auto":
            payload: Any = named_tensors
        else:
            payload = safetensors_bytes(named_tensors)
        self.llm.collective_rpc("evr1_load_weights", args=(payload,))
        self._drop_caches()

    def update_adapter(self, adapter_dir: str) -> None:
        """Serve the LoRA adapter in ``adapter_dir`` (PEFT format) from now on (``max_lora_rank``).

        It is registered under a new id (vLLM reads the files now; the directory may be rewritten
        afterwards) and the previous adapter is dropped, then the caches are dropped as after a
        weight push (the encoder cache too, in case the adapter reaches the vision path)."""
        from vllm.lora.request import LoRARequest

        if not self.adapter_sync:
            raise RuntimeError(
                "this vLLM engine was started without LoRA (max_lora_rank=0): push merged weights"
            )
        old = self._adapter
        new_id = old.lora_int_id + 1 if old is not None else 1
        request = LoRARequest(f"evr1-policy-{new_id}", new_id, os.path.abspath(adapter_dir))
        if not self.llm.llm_engine.add_lora(request):
            raise RuntimeError(f"vLLM could not load the LoRA adapter in {adapter_dir}")
        self._adapter = request
        if old is not None:
            self.llm.llm_engine.remove_lora(old.lora_int_id)
        self._drop_caches()

    def _drop_caches(self) -> None:
        """After new weights or a new adapter: drop what was computed with the old ones (prefix
        KV, vision embeddings) and the step's preprocessed media (see the module doc)."""
        if not self.llm.reset_prefix_cache():
            log.warning("vLLM could not reset its prefix cache (requests still running?)")
        self.llm.llm_engine.reset_encoder_cache()
        self.llm.reset_mm_cache()

    def sleep(self, level: int = 1) -> None:
        """Free GPU memory for training (level 1 offloads weights to host memory, 2 discards
        them) and drop the KV cache; a no-op without sleep mode (CPU)."""
        if self._sleep_ok:
            self.llm.sleep(level=level)

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Map back the memory :meth:`sleep` released: ``tags`` ``["weights"]`` then
        ``["kv_cache"]`` lets a push land before the KV cache is allocated (None: both)."""
        if self._sleep_ok:
            self.llm.wake_up(tags=tags)

    def close(self) -> None:
        """Shut the engine down (worker processes included) and release its memory."""
        self._queue_stop()
        llm = getattr(self, "llm", None)
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()
            self.llm = None


_VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's LoRAConfig.max_lora_rank choices


def _vllm_lora_rank(rank: int) -> int:
    """The smallest rank vLLM accepts as ``max_lora_rank`` that holds ``rank``."""
    for r in _VLLM_LORA_RANKS:
        if r >= rank:
            return r
    raise ConfigError(f"LoRA rank {rank} is above vLLM's largest max_lora_rank ({_VLLM_LORA_RANKS[-1]})")


@contextmanager
def _global_rng_kept() -> Iterator[None]:
    import numpy as np

    states = random.getstate(), np.random.get_state()
    with torch.random.fork_rng(
        devices=range(torch.cuda.device_count()) if torch.cuda.is_initialized() else []
    ):
        try:
            yield
        finally:
            random.setstate(states[0])
            np.random.set_state(states[1])


def _cast_floating(named_tensors, dtype: torch.dtype) -> Iterator[tuple[str, torch.Tensor]]:
    """The pairs with floating tensors in ``dtype``, one at a time: an fp32 master pushes bf16
    copies (half the bytes) to a bf16 engine, never a whole cast state dict."""
    for name, t in named_tensors:
        yield name, t.to(dtype) if t.is_floating_point() else t


def _current_device() -> str:
    """This process's current device: ``cuda:<index>`` on a GPU, else ``cpu``."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return f"cuda:{torch.cuda.current_device()}"
    return "cpu"


def _check_device_kept(before: str, executor: str) -> None:
    """Starting the engine must leave this rank on its own device: an executor that does not
    follow ``LOCAL_RANK`` moves every rank to device 0, where the trainer's collectives and
    tensors would then land."""
    after = _current_device()
    if after != before:
        raise ValueError(
            f"the vLLM engine ({executor} executor) moved this rank from {before} to {after}: under "
            "torchrun an in-process engine must use the external_launcher executor (LOCAL_RANK)"
        )


def _torch_distributed_ready() -> bool:
    return torch.distributed.is_available() and torch.distributed.is_initialized()


def _keep_callers_process_group() -> None:
    """Stop vLLM's in-process shutdown from destroying torch's default process group.

    Under torchrun the trainer creates that group and each rank runs its own in-process engine;
    vLLM joins the existing group, builds its own subgroups on it, and on shutdown (``close()`` or
    garbage collection) would destroy the default group too, leaving the trainer without one.
    Its own groups are still destroyed.
    """
    import vllm.v1.engine.core as core
    from vllm.distributed import parallel_state

    if getattr(core.cleanup_dist_env_and_memory, "keeps_default_group", False):
        return

    def cleanup(shutdown_ray: bool = False) -> None:
        parallel_state.destroy_model_parallel()
        if parallel_state._WORLD is not None:
            parallel_state._WORLD.destroy()  # vLLM's groups over the world, not the default group
            parallel_state._WORLD = None
        gc.collect()

    cleanup.keeps_default_group = True  # type: ignore[attr-defined]
    core.cleanup_dist_env_and_memory = cleanup


__all__ = ["VLLMRolloutEngine", "WeightSyncExtension", "safetensors_bytes", "vllm_prompt"]
