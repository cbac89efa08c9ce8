"""The types of one step's experience: a response, the rewards of a batch of responses, and the
experience (``N`` sequences grouped by prompt, as padded tensors) every later stage reads.

Built by ``rollouts.py`` (a round's groups), scored by ``scoring.py``, merged over rounds and
shares by ``rounds.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..algorithms.distill import TeacherSignal
from ..models.inputs import PromptBatch

SCORE_KEYS = ("overall", "accuracy", "format")


@dataclass
class Experience:
    """``N`` sequences (grouped by prompt, in prompt order) and everything the update needs."""

    batch: PromptBatch
    prompt_of: list[int]  # prompt index of each sequence
    ids: torch.Tensor  # [N, T] response ids, right-padded
    mask: torch.Tensor  # [N, T] the loss mask: the policy's own tokens
    texts: list[str]
    offline: torch.Tensor  # [N] bool
    truncated: torch.Tensor  # [N] bool
    scores: dict[str, torch.Tensor]  # overall / accuracy / format, [N]
    tasks: list[str]
    advantages: torch.Tensor | None = None  # [N, T]
    old_logp: torch.Tensor | None = None  # [N, T]
    ref_logp: torch.Tensor | None = None  # [N, T]
    # the distillation teacher's log-prob of each sampled token, and its top-k (``algorithm.distill``)
    teacher: TeacherSignal | None = None
    # the engine's own log-prob of each sampled token (NaN rows: offline or not returned); compared
    # with old_logp it measures the training/inference mismatch, e.g. stale rollout weights
    rollout_logp: torch.Tensor | None = None  # [N, T]
    # rollout correction (``algorithm.rollout_correction``): each token's weight in the policy loss
    is_weights: torch.Tensor | None = None  # [N, T]
    metrics: dict[str, float] = field(default_factory=dict)
    # [N] bool: no reward (the endpoint judge gave no verdict, ``reward.judge.on_failure=skip``):
    # left out of its group's advantage and of the loss
    unscored: torch.Tensor | None = None
    # episodes (tools): the real tokens of each response, tool turns included (None: ``mask``),
    # the tool turns' vision tensors per sequence and the responses' mm_token_type_ids
    valid: torch.Tensor | None = None  # [N, T]
    response_media: list[dict | None] | None = None
    response_types: torch.Tensor | None = None  # [N, T]

    def __len__(self) -> int:
        return len(self.prompt_of)

    @property
    def real(self) -> torch.Tensor:
        """``[N, T]``: the tokens the forward attends (every real token of each response)."""
        return self.mask if self.valid is None else self.valid

    def lengths(self) -> list[int]:
        """Each response's length in tokens (tool turns included)."""
        return self.real.sum(1).tolist()


@dataclass
class Response:
    """One response of a group: generated (``logp`` = the engine's log-probs, if it returned them)
    or offline (a record's ``offline_output``, tokenised)."""

    ids: torch.Tensor  # [L], ends with the end-of-turn token unless truncated
    text: str
    offline: bool
    truncated: bool
    logp: torch.Tensor | None = None  # [L]
    # an episode's: 1 on the policy's tokens (None: all), its tool turns' media and token types
    policy: torch.Tensor | None = None  # [L]
    media: dict | None = None
    types: torch.Tensor | None = None  # [L]
    episode: object | None = None


@dataclass
class Scores:
    """Rewards of ``N`` responses: ``overall`` / ``accuracy`` / ``format`` tensors ``[N]``, the task of
    each, how many scorings raised (recorded with zero scores, see ``rewards.scoring``), which
    responses have no reward (``unscored``, ``[N]`` bool) and the judge's counters of the batch."""

    values: dict[str, torch.Tensor]
    tasks: list[str]
    errors: int
    unscored: torch.Tensor | None = None
    judge: dict[str, float] = field(default_factory=dict)

    def __iter__(self):  # (values, tasks, errors), as callers unpack it
        return iter((self.values, self.tasks, self.errors))


def pad_stack(rows: list[torch.Tensor], pad: int) -> torch.Tensor:
    """Variable-length 1-D rows as one right-padded ``[N, T]`` tensor."""
    width = max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), max(width, 1)), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def stacked(batch: PromptBatch, groups: list[list[Response]], pad_id: int) -> Experience:
    """The groups as padded tensors (scores left empty, ``scoring.py`` fills them): what a forward
    over them needs."""
    prompt_of = [p for p, group in enumerate(groups) for _ in group]
    flat = [r for group in groups for r in group]
    ids = pad_stack([r.ids for r in flat], pad_id)
    ones = [torch.ones(len(r.ids), dtype=torch.long) for r in flat]
    mask = pad_stack([r.policy if r.policy is not None else o for r, o in zip(flat, ones, strict=True)], 0)
    rollout_logp = None
    if any(r.logp is not None for r in flat):
        rollout_logp = torch.full(ids.shape, float("nan"))
        for i, r in enumerate(flat):
            if r.logp is not None:
                rollout_logp[i, : len(r.logp)] = r.logp
    extra = {}
    if any(r.policy is not None for r in flat):  # episodes
        types = [r.types if r.types is not None else torch.zeros(len(r.ids), dtype=torch.long) for r in flat]
        extra = dict(
            valid=pad_stack(ones, 0),
            response_media=[r.media for r in flat],
            response_types=None if all(r.types is None for r in flat) else pad_stack(types, 0),
        )
    return Experience(
        batch=batch,
        prompt_of=prompt_of,
        ids=ids,
        mask=mask,
        texts=[r.text for r in flat],
        offline=torch.tensor([r.offline for r in flat]),
        truncated=torch.tensor([r.truncated for r in flat]),
        scores={},
        tasks=[],
        rollout_logp=rollout_logp,
        **extra,
    )
