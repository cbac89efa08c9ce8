"""Rollouts with Hugging Face ``generate`` (any machine; batched over prompts and samples).

``generate`` takes an encoded batch (the trainer's rollouts); ``submit`` takes one request at a
time and batches whatever has gathered (:class:`~.base.RequestQueue`), encoding the rendered
prompts with the processor here. A seeded request runs alone after ``torch.manual_seed(seed)``,
so its responses do not depend on what else was waiting.

A group's prompt is read once: one forward over the prompt batch (one row per prompt, its video
through the vision tower once) fills a KV cache with every prompt token but the last, the cache
is repeated to the group's ``n`` rows, and ``generate`` continues from it (it feeds only the
tokens the cache lacks: each row's last prompt token, whose logits give the first sampled token).
Positions are the ones ``generate`` itself would give the full rows (M-RoPE included), passed
explicitly, so the decode steps are those of an unshared ``generate``.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from transformers import Cache, LogitsProcessor, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList

from ..models.inputs import PromptBatch, gather_prompts, to_device
from .base import (
    Request,
    RequestQueue,
    Responses,
    SamplingConfig,
    banned_token_ids,
    cut_at_eos,
    split_responses,
)

# the inputs with one value per prompt token (what the cache covers is cut from them)
_PER_TOKEN = ("input_ids", "attention_mask", "mm_token_type_ids")


class PresencePenalty(LogitsProcessor):
    """``logit -= penalty`` for each token already generated in the row (the prompt does not count).

    vLLM's presence penalty, for ``generate``: transformers applies custom processors before its
    temperature and top-k/top-p warpers, which is where vLLM applies its penalties too.
    """

    def __init__(self, penalty: float, prompt_len: int):
        self.penalty, self.prompt_len = penalty, prompt_len

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        generated = input_ids[:, self.prompt_len :]
        if generated.shape[1] == 0:
            return scores
        seen = torch.zeros_like(scores, dtype=torch.bool).scatter_(1, generated, True)
        return scores - self.penalty * seen.to(scores.dtype)


class RequestProgress(StoppingCriteria):
    """Each request's :class:`~.base.Progress` read at every decode step of a ``generate`` over
    those requests: a row reports its new token until its end-of-turn token, and stops (its later
    tokens are padding, and ``generate`` ends when every row has stopped) once its request is
    cancelled."""

    def __init__(self, requests: list[Request], eos_ids: list[int]):
        self.rows = [(r.progress, j) for r in requests for j in range(r.n)]
        self.eos_ids = set(eos_ids)
        self.ended = [False] * len(self.rows)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor, **kwargs) -> torch.BoolTensor:
        stop = []
        for i, ((progress, j), token) in enumerate(zip(self.rows, input_ids[:, -1].tolist(), strict=True)):
            cancelled = progress is not None and progress.cancelled.is_set()
            if progress is not None and not self.ended[i]:
                if progress.on_token is not None:
                    progress.on_token(j, token)
                cancelled = progress.cancelled.is_set()  # the callback may cancel
                self.ended[i] = token in self.eos_ids or cancelled  # later tokens are padding
            stop.append(cancelled)
        return torch.tensor(stop, dtype=torch.bool, device=input_ids.device)


class HFRolloutEngine(RequestQueue):
    """``generate`` over a Hugging Face model (the :class:`~.base.RolloutEngine` protocol).

    ``owns_weights=False`` (one process): the model *is* the training model, so updates reach it
    without a push. ``True``: the model is a separate full copy (under FSDP) that
    :meth:`update_weights` keeps equal to the trainer's. ``max_batch``: requests per ``generate``
    call on the request path.
    """

    adapter_sync = False  # plain HF weights: LoRA reaches the copy merged
    weight_dtype = None  # pushed weights are copied into its model, which casts them
    runs_episodes = True

    def __init__(self, model, processor, owns_weights: bool = False, max_batch: int = 16):
        self.model, self.processor = model, processor
        self._family: str | None = None
        self.owns_weights, self.max_batch = owns_weights, max_batch
        tok = processor.tokenizer
        self.banned = banned_token_ids(tok)
        eos = model.generation_config.eos_token_id
        self.eos_ids = [eos] if isinstance(eos, int) else list(eos or [tok.eos_token_id])
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else self.eos_ids[0]

    @property
    def family(self) -> str:
        """The model family's name (its chat format and media handling)."""
        if self._family is None:
            from ..models.families import family_of_model

            self._family = family_of_model(self.model).model_type
        return self._family

    @torch.no_grad()
    def generate(
        self,
        batch: PromptBatch,
        repeats: list[int],
        sampling: SamplingConfig,
        progress: RequestProgress | None = None,
    ) -> Responses:
        """The protocol's ``generate``; ``progress`` (the request path's) watches every decode step."""
        if len(repeats) != len(batch):
            raise ValueError(f"{len(repeats)} repeat counts for {len(batch)} prompts")
        if sum(repeats) == 0:
            empty = torch.zeros((0, 0), dtype=torch.long)
            return Responses(ids=empty, mask=empty, texts=[], truncated=[])
        device = next(self.model.parameters()).device
        kept = [i for i, r in enumerate(repeats) if r]
        prompts = to_device(gather_prompts(batch, kept), device)
        rows = torch.repeat_interleave(
            torch.arange(len(kept), device=device), torch.tensor([repeats[i] for i in kept], device=device)
        )
        prompt_len = prompts["input_ids"].shape[1]
        greedy = sampling.temperature == 0
        was_training = self.model.training
        self.model.eval()
        try:
            cache, positions = self._shared_prefill(prompts, rows)
            out = self.model.generate(
                input_ids=prompts["input_ids"][rows],
                attention_mask=prompts["attention_mask"][rows],
                position_ids=positions,
                past_key_values=cache,
                max_new_tokens=sampling.max_new_tokens,
                min_new_tokens=sampling.min_new_tokens or None,
                logits_processor=(
                    LogitsProcessorList([PresencePenalty(sampling.presence_penalty, prompt_len)])
                    if sampling.presence_penalty
                    else None
                ),
                do_sample=not greedy,
                temperature=None if greedy else sampling.temperature,
                top_p=None if greedy else sampling.top_p,
                top_k=None if greedy else sampling.top_k,
                stopping_criteria=StoppingCriteriaList([progress]) if progress is not None else None,
                suppress_tokens=self.banned,
                eos_token_id=self.eos_ids,
                pad_token_id=self.pad_id,
                output_scores=sampling.return_logprobs,
                return_dict_in_generate=True,
            )
        finally:
            self.model.train(was_training)
        ids, mask, truncated = cut_at_eos(out.sequences[:, prompt_len:].cpu(), self.eos_ids, self.pad_id)
        logprobs = None
        if sampling.return_logprobs:
            # out.scores: the processed logits each token was sampled from (temperature, top-k/p, banned)
            scores = torch.stack(out.scores, dim=1)[:, : ids.shape[1]].float().cpu()
            logprobs = torch.log_softmax(scores, dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
            logprobs = torch.where(mask.bool(), logprobs, torch.zeros_like(logprobs))
        texts = [self.decode(row[m.bool()]) for row, m in zip(ids, mask, strict=True)]
        return Responses(ids=ids, mask=mask, texts=texts, truncated=truncated, logprobs=logprobs)

    def _shared_prefill(self, prompts: dict, rows: torch.Tensor) -> tuple[Cache, torch.Tensor]:
        """The KV cache of every prompt token but the last, computed once per prompt (vision
        included) and repeated to ``rows`` (prompt index per sampled row), and the positions of the
        rows' full prompts, as ``generate`` gives them.

        The positions come from ``generate``'s own hook (M-RoPE's 3-D positions for the Qwen-VL
        and GLM families, the attention mask's running count for 1-D RoPE), computed on the prompt
        rows and repeated; ``rope_deltas``, which the M-RoPE families keep on the model for decode
        steps without positions, is repeated with them. The cache's ``reorder_cache`` repeats every
        layer's state: keys and values, and the conv and recurrent states of Qwen3.5's
        gated-DeltaNet layers (the state after the prompt's last-but-one token, which the decode
        step then advances).
        """
        model = self.model
        model_kwargs = {k: v for k, v in prompts.items() if k != "input_ids"}
        positions = model._prepare_position_ids_for_generation(prompts["input_ids"], dict(model_kwargs))
        head = {k: v[:, :-1] for k, v in prompts.items() if k in _PER_TOKEN}
        mask = head.pop("attention_mask")
        out = model(
            **{k: v for k, v in prompts.items() if k not in _PER_TOKEN},
            **head,
            attention_mask=None if bool((mask == 1).all()) else mask,  # generate drops an all-ones mask too
            position_ids=positions[..., :-1],
            use_cache=True,
            logits_to_keep=1,
        )
        cache = out.past_key_values
        cache.reorder_cache(rows)
        base = model.model
        if getattr(base, "rope_deltas", None) is not None:
            base.rope_deltas = base.rope_deltas[rows]
        return cache, positions.index_select(positions.ndim - 2, rows)

    def run_batch(self, requests: list[Request]) -> list[Responses]:
        """The request path: encode the rendered prompts, one ``generate``, rows split per request."""
        from ..data.dataset import encode_loaded

        if requests[0].episode_tools is not None:  # alone in its batch (RequestQueue)
            from .episode import request_episodes

            return [request_episodes(self, self.processor, requests[0], self.family)]
        batch = encode_loaded(
            self.processor,
            [r.prompt.text for r in requests],
            [(r.prompt.videos, r.prompt.images) for r in requests],
            self.family,
        )
        if requests[0].seed is not None:  # alone in its batch (RequestQueue): reproducible per request
            self.reseed(requests[0].seed)
        counts = [r.n for r in requests]
        sampling = requests[0].sampling
        if not any(r.progress for r in requests):  # the protocol's call: an engine may override it
            return split_responses(self.generate(batch, counts, sampling), counts)
        progress = RequestProgress(requests, self.eos_ids)
        return split_responses(self.generate(batch, counts, sampling, progress), counts)

    def generate_episodes(
        self, batch: PromptBatch, repeats: list[int], sampling: SamplingConfig, episode_tools: list
    ) -> Responses:
        """:meth:`generate` with every response an episode (``episode_tools[p]()``: prompt ``p``'s
        tools, fresh budgets each): the trainer's rollouts with ``tools.names``."""
        from .episode import run_batch_episodes

        return run_batch_episodes(self, self.processor, batch, repeats, sampling, self.family, episode_tools)

    def reseed(self, seed: int) -> None:
        """Seed the generator the next ``generate`` draws from."""
        torch.manual_seed(seed)  # seeds every device's generator too

    @torch.no_grad()
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy full weights, by transformers parameter name, into the engine's own model."""
        if not self.owns_weights:
            raise RuntimeError("this HF engine generates with the training model itself: nothing to update")
        target = self.model.state_dict()
        for name, tensor in named_tensors:
            target[name].copy_(tensor)

    def sleep(self, level: int = 1) -> None:
        """Nothing to release: ``generate`` holds no memory between calls."""

    def wake_up(self, tags: list[str] | None = None) -> None:
        """See :meth:`sleep`."""

    def update_adapter(self, adapter_dir: str) -> None:
        raise RuntimeError("the HF engine takes merged weights (update_weights), not an adapter")

    def close(self) -> None:
        """Stop the request worker (the model belongs to the caller)."""
        self._queue_stop()

    def decode(self, ids: torch.Tensor) -> str:
        """Response text without the end-of-turn token (tags like <answer> are kept: rewards read them)."""
        ids = [i for i in ids.tolist() if i not in self.eos_ids]
        return self.processor.tokenizer.decode(ids, skip_special_tokens=False)
