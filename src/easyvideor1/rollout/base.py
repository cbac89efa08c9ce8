"""The rollout interface: prompts (with media) in, sampled responses out.

Engines (Hugging Face ``generate`` in ``hf.py``, vLLM in ``vllm.py``) return token ids
cut after the first end-of-turn token and right-padded, so the trainer never sees text it did
not generate. Vision placeholder tokens can never be sampled.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

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


class RolloutEngine(Protocol):
    """What the trainer and evaluation use of an engine (``hf.py``, ``vllm.py``); nothing is probed.

    Attributes:
        eos_ids: End-of-turn token ids; responses are cut after the first one.
        pad_id: Right-padding id of :class:`Responses`.
        banned: Token ids never sampled (vision placeholders); masked out of training log-probs too.
        owns_weights: True when the engine generates with its own copy of the policy, which must
            receive the trainer's weights (:meth:`update_weights`) after every optimizer step.
    """

    eos_ids: list[int]
    pad_id: int
    banned: list[int]
    owns_weights: bool

    def generate(self, batch: PromptBatch, repeats: list[int], sampling: SamplingConfig) -> Responses:
        """Sample ``repeats[i]`` responses for prompt ``i``, in prompt order."""
        ...

    def decode(self, ids: torch.Tensor) -> str:
        """Response text of ``ids`` without the end-of-turn token."""
        ...

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load full (unsharded) policy weights by transformers parameter name."""
        ...

    def sleep(self) -> None:
        """Release the engine's accelerator memory for the update (a no-op where unsupported)."""
        ...

    def wake_up(self) -> None:
        """Take the memory released by :meth:`sleep` back."""
        ...

    def close(self) -> None:
        """Release the engine for good."""
        ...


def banned_token_ids(tokenizer) -> list[int]:
    """Ids of every registered family's vision placeholder tokens that the tokenizer has."""
    tokens = dict.fromkeys(t for name in family_names() for t in get_family(name).placeholder_tokens)
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
