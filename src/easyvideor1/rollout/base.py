"""The rollout interface: prompts (with media) in, sampled responses out.

Every engine (Hugging Face ``generate`` in ``hf.py``, vLLM in ``vllm.py``) offers the same two
ways in, and declares what it can do instead of being probed:

* request level: :meth:`RolloutEngine.submit` takes one :class:`Request` (a rendered prompt with
  its loaded media, ``n``, sampling settings, an optional seed) and returns a ``Future`` at once;
  many may be in flight (a request's :class:`Progress` lets its caller see its tokens as they are
  sampled and cancel it: the chat server's streaming and disconnects). The pipeline (``pipeline.py``) that validation, ``eval`` and ``filter``
  share submits each sample the moment its media is loaded.
* batch level: :meth:`RolloutEngine.generate` samples for an encoded :class:`PromptBatch` (the
  trainer's rollouts, which reuse the batch's tensors for log-probs).

Engines that generate in batches (HF ``generate``, vLLM's ``LLM``) serve ``submit`` with
:class:`RequestQueue`: requests wait in a queue and a worker thread runs whatever has gathered as one
batch. Responses are token ids cut after the first end-of-turn token and right-padded, so the
trainer never sees text it did not generate. Vision placeholder tokens can never be sampled.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from ..models.families import family_names, get_family
from ..models.inputs import PromptBatch
from .sampling import SamplingConfig


@dataclass
class Responses:
    """``N`` responses: ids ``[N, T]`` right-padded with ``pad_id``, mask 1 up to and including EOS."""

    ids: torch.Tensor
    mask: torch.Tensor
    texts: list[str]
    truncated: list[bool] = field(default_factory=list)  # hit max_new_tokens without EOS
    logprobs: torch.Tensor | None = (
        None  # [N, T] log-prob of each sampled token under the sampling distribution
    )
    # multi-turn requests: each row's episode (``rollout/episode.py``); ids/mask are then the whole
    # episode after the prompt, mask 1 on the policy's own tokens only
    episodes: list | None = None


@dataclass
class Prompt:
    """One prompt as every engine takes it: the chat-rendered text (generation prompt included,
    vision placeholders unexpanded) and its loaded media (``media.video.Video`` objects with frames
    already sampled and resized, and PIL images)."""

    text: str
    videos: list = field(default_factory=list)
    images: list = field(default_factory=list)
    raw: dict[str, list] | None = None  # the media already as vLLM takes them (a PromptBatch's)


@dataclass
class Progress:
    """A caller's hold on a request while it runs (the chat server's): setting ``cancelled`` stops
    the request's rows at the next decode step, and ``on_token(row, token_id)``, when given, sees
    each token as it is sampled, end-of-turn token included (engines that generate step by step
    honour both; a cancelled request still waiting is never started)."""

    cancelled: threading.Event = field(default_factory=threading.Event)
    on_token: Callable[[int, int], None] | None = None


@dataclass
class Request:
    """``n`` responses to one prompt. ``seed`` makes the request reproducible on its own (it is
    then never batched with another request, whose draws would change its own); ``key`` names it
    in errors and in the engine's logs. ``episode_tools``, when given, makes each response an
    episode: a function returning a fresh :class:`~easyvideor1.tools.calls.EpisodeTools` (its
    budgets are per episode) for engines with ``runs_episodes``. ``progress``: see :class:`Progress`."""

    key: str
    prompt: Prompt
    sampling: SamplingConfig
    n: int = 1
    seed: int | None = None
    episode_tools: Any = None
    progress: Progress | None = None

    @property
    def alone(self) -> bool:
        """Run in a batch of its own (seeded, or an episode)."""
        return self.seed is not None or self.episode_tools is not None


class RolloutEngine(Protocol):
    """What the trainer, validation, evaluation and curation use of an engine; nothing is probed.

    Attributes:
        eos_ids: End-of-turn token ids; responses are cut after the first one.
        pad_id: Right-padding id of :class:`Responses`.
        banned: Token ids never sampled (vision placeholders); masked out of training log-probs too.
        owns_weights: True when the engine generates with its own copy of the policy, which must
            receive the trainer's weights (:meth:`update_weights`) after every optimizer step.
        adapter_sync: True when the engine serves a LoRA adapter on top of base weights and takes
            only the adapter (:meth:`update_adapter`) instead of merged weights.
        runs_episodes: True when a request's ``episode_tools`` are run (multi-turn episodes).
        weight_dtype: The dtype the engine holds its weights in (pushed weights are cast to it),
            or None where it takes them as they come.
    """

    eos_ids: list[int]
    pad_id: int
    banned: list[int]
    owns_weights: bool
    adapter_sync: bool
    runs_episodes: bool
    weight_dtype: torch.dtype | None

    def submit(self, request: Request) -> Future:
        """Queue one request; the future gives its :class:`Responses` (``request.n`` rows)."""
        ...

    def generate(self, batch: PromptBatch, repeats: list[int], sampling: SamplingConfig) -> Responses:
        """Sample ``repeats[i]`` responses for prompt ``i``, in prompt order."""
        ...

    def generate_episodes(
        self, batch: PromptBatch, repeats: list[int], sampling: SamplingConfig, episode_tools: list
    ) -> Responses:
        """:meth:`generate` with each response an episode (engines with ``runs_episodes``):
        ``episode_tools[i]()`` gives prompt ``i``'s per-episode tools."""
        ...

    def decode(self, ids: torch.Tensor) -> str:
        """Response text of ``ids`` without the end-of-turn token."""
        ...

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load full (unsharded) policy weights by transformers parameter name."""
        ...

    def update_adapter(self, adapter_dir: str) -> None:
        """Serve the PEFT adapter in ``adapter_dir`` from now on (engines with ``adapter_sync``)."""
        ...

    def sleep(self, level: int = 1) -> None:
        """Release the engine's accelerator memory for the update (a no-op where unsupported):
        level 1 keeps a host copy of the weights, level 2 discards them (the next push rewrites
        every weight anyway)."""
        ...

    def wake_up(self, tags: list[str] | None = None) -> None:
        """Take the memory released by :meth:`sleep` back: all of it, or only ``tags``
        (``["weights"]``, then ``["kv_cache"]``), so the weights can be pushed before the KV
        cache takes its share."""
        ...

    def close(self) -> None:
        """Release the engine for good."""
        ...


def banned_token_ids(tokenizer) -> list[int]:
    """Ids of every registered family's vision placeholder tokens that the tokenizer has."""
    tokens = dict.fromkeys(t for name in family_names() for t in get_family(name).tokens.placeholder_tokens)
    ids = [tokenizer.convert_tokens_to_ids(t) for t in tokens]
    return [i for i in ids if i is not None and i != tokenizer.unk_token_id]


def cut_at_eos(
    seqs: torch.Tensor, eos_ids: list[int], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor, list[bool]]:
    """Keep each row up to and including its first EOS; pad the rest. Returns ids, mask, truncated."""
    is_eos = torch.isin(seqs, torch.tensor(eos_ids))
    has_eos = is_eos.any(dim=1)
    first = torch.where(
        has_eos, is_eos.int().argmax(dim=1), torch.full_like(has_eos, seqs.shape[1] - 1, dtype=torch.long)
    )
    positions = torch.arange(seqs.shape[1]).unsqueeze(0)
    mask = (positions <= first.unsqueeze(1)).long()
    ids = torch.where(mask.bool(), seqs, torch.full_like(seqs, pad_id))
    return ids, mask, (~has_eos).tolist()


_STOP = object()


class RequestQueue:
    """``submit`` for engines that generate in batches: requests wait in a queue; one worker thread
    takes the first waiting request plus every other one already waiting that can share its batch
    (same sampling settings, no seed), up to ``max_batch``, and runs them together with
    :meth:`run_batch`. A failed batch of several is retried one request at a time, so one bad
    prompt (say, longer than the model allows) fails alone.

    Subclasses implement ``run_batch(requests) -> list[Responses]`` (one per request, in order).
    """

    max_batch: int = 16

    def _queue_start(self) -> None:
        self._requests: queue.Queue = queue.Queue()
        self._worker = threading.Thread(
            target=self._serve, name=f"{type(self).__name__}-requests", daemon=True
        )
        self._worker.start()

    def submit(self, request: Request) -> Future:
        if getattr(self, "_requests", None) is None:  # started on first use: the trainer may never submit
            self._queue_start()
        future: Future = Future()
        self._requests.put((request, future))
        return future

    def run_batch(self, requests: list[Request]) -> list[Responses]:
        raise NotImplementedError

    def _serve(self) -> None:
        held = None
        while True:
            first = held if held is not None else self._requests.get()
            held = None
            if first is _STOP:
                return
            batch = [first]
            while not first[0].alone and len(batch) < self.max_batch:
                try:
                    item = self._requests.get_nowait()
                except queue.Empty:
                    break
                if item is _STOP or item[0].alone or item[0].sampling != first[0].sampling:
                    held = item  # it starts the next batch (or stops the worker after this one)
                    break
                batch.append(item)
            self._run(batch)

    def _run(self, batch: list[tuple[Request, Future]]) -> None:
        live = [(r, f) for r, f in batch if f.set_running_or_notify_cancel()]
        if not live:
            return
        try:
            outs = self.run_batch([r for r, _ in live])
        except Exception as e:
            if len(live) > 1:  # retry alone: only the request at fault fails
                for item in live:
                    self._run_one(*item)
                return
            live[0][1].set_exception(e)
            return
        for (_, f), out in zip(live, outs, strict=True):
            f.set_result(out)

    def _run_one(self, request: Request, future: Future) -> None:
        try:
            future.set_result(self.run_batch([request])[0])
        except Exception as e:
            future.set_exception(e)

    def _queue_stop(self) -> None:
        if getattr(self, "_requests", None) is not None:
            self._requests.put(_STOP)
            self._worker.join(timeout=60)
            self._requests = None


def split_responses(out: Responses, counts: list[int]) -> list[Responses]:
    """One :class:`Responses` per request from a batch's rows (``counts[i]`` rows each, in order)."""
    parts, start = [], 0
    for c in counts:
        rows = slice(start, start + c)
        mask = out.mask[rows]
        width = int(mask.sum(1).max()) if c and mask.numel() else 0
        parts.append(
            Responses(
                ids=out.ids[rows, :width],
                mask=mask[:, :width],
                texts=out.texts[rows],
                truncated=list(out.truncated[rows]) if out.truncated else [],
                logprobs=None if out.logprobs is None else out.logprobs[rows, :width],
            )
        )
        start += c
    return parts


def request_media(prompt: Prompt) -> dict[str, Any]:
    """A prompt's media as engines with their own processor take them (see ``data.dataset.raw_media``)."""
    from ..data.dataset import raw_media

    return prompt.raw if prompt.raw is not None else raw_media(prompt.videos, prompt.images)
