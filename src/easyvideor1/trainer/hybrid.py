"""Hybrid groups: a record's offline response (``offline_output``, or with tools its
``offline_turns`` replayed as an episode) taking ``k`` places of its group.

For a record with an offline response, the group holds ``n - k`` generated responses and ``k``
offline ones; only ``n - k`` are generated (the reference generated ``n`` and overwrote one).
Offline text is tokenised with the end-of-turn token appended and truncated to the response
limit (flagged), scored by the same reward function, and takes part in the group statistics. In
``below_threshold`` mode the ``n - k`` online responses are scored first; a group whose mean
accuracy reaches the threshold is completed with ``k`` more online responses instead
(:func:`confident_groups`).
"""

from __future__ import annotations

import torch

from ..data.dataset import MediaSample
from ..models.inputs import PromptBatch
from ..rollout.base import RolloutEngine, SamplingConfig
from ..tools.session import ToolSession
from .experience import Response
from .scoring import score


def tokenize_offline(tokenizer, text: str, eos_id: int, max_tokens: int) -> tuple[torch.Tensor, bool]:
    """Offline response ids with the end-of-turn token appended; truncated (flag True) to the limit."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [eos_id]
    truncated = len(ids) > max_tokens
    return torch.tensor(ids[:max_tokens], dtype=torch.long), truncated


def offline_response(
    engine: RolloutEngine,
    processor,
    batch: PromptBatch,
    p: int,
    sample: MediaSample,
    sampling: SamplingConfig,
    tools: ToolSession | None = None,
) -> Response:
    """The record's offline response to prompt ``p`` of ``batch``: ``offline_output`` tokenised
    (cut to the response limit), or with tools its ``offline_turns`` replayed as an episode (the
    calls in them run, each turn cut to the limit)."""
    rec = sample.record
    if tools is not None and rec.offline_turns:
        from ..rollout.episode import prompt_row, replay_episode

        ep = replay_episode(
            engine, processor, prompt_row(batch, p), tools.episode(rec, list(sample.videos)),
            rec.offline_turns, sampling, tools.model_family, rec.problem_id,
        )  # fmt: skip
        return Response(
            torch.tensor(ep.ids, dtype=torch.long),
            ep.final_text,
            True,
            ep.finish == "length",
            policy=torch.tensor(ep.policy_mask, dtype=torch.long),
            media=ep.tool_inputs or None,
            types=ep.response_types(),
            episode=ep,
        )
    ids, trunc = tokenize_offline(
        processor.tokenizer, rec.offline_output, engine.eos_ids[0], sampling.max_new_tokens
    )
    # a truncated offline response is scored on what is trained: the kept tokens only
    return Response(ids, engine.decode(ids) if trunc else rec.offline_output, True, trunc)


def has_offline(sample: MediaSample, tools: ToolSession | None) -> bool:
    """Whether the record has an offline response to use (turns need the tools)."""
    rec = sample.record
    return bool(rec.offline_turns) if tools is not None and rec.offline_turns else bool(rec.offline_output)


def confident_groups(
    groups: list[list[Response]], samples: list[MediaSample], reward_cfg, threshold: float
) -> list[bool]:
    """Per prompt: the mean accuracy of its online responses reaches ``threshold``."""
    prompt_of = [p for p, group in enumerate(groups) for _ in group]
    flat = [r for group in groups for r in group]
    acc = score([r.text for r in flat], samples, prompt_of, [len(r.ids) for r in flat], reward_cfg).values[
        "accuracy"
    ]
    out = []
    for p in range(len(groups)):
        idx = [i for i, q in enumerate(prompt_of) if q == p]
        out.append((float(acc[idx].mean()) if idx else 0.0) >= threshold)
    return out
