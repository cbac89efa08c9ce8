"""One round's rollouts: the groups of responses to a batch of prompts, generated (episodes with
tools) and streamed to the endpoint judge chunk by chunk, then completed with offline responses
(``hybrid.py``). Scoring them is ``scoring.py``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch

from ..data.dataset import MediaSample
from ..models.inputs import PromptBatch
from ..rewards import prefetch_judgements
from ..rollout.base import Responses
from .experience import Response
from .hybrid import confident_groups, has_offline, offline_response
from .state import StepContext


@dataclass
class Groups:
    """A round's groups of responses, in prompt order."""

    responses: list[list[Response]]
    with_offline: int
    """How many groups were completed with offline responses (``hybrid/groups_with_offline``)."""


def collect(ctx: StepContext, batch: PromptBatch, samples: list[MediaSample]) -> Groups:
    """Generate and add offline responses: the groups of ``samples`` (prompt order kept), on the
    rollout engine with the step's sampling. With tools every generated response is an episode
    (``rollout/episode.py``)."""
    engine, processor, tools = ctx.parts.engine, ctx.parts.processor, ctx.parts.tools
    rollout_cfg, sampling, reward_cfg = ctx.cfg.rollout, ctx.settings.sampling, ctx.cfg.reward
    n, k, mode = rollout_cfg.n, rollout_cfg.offline_k, rollout_cfg.hybrid
    offline = [mode != "off" and k > 0 and has_offline(s, tools) for s in samples]
    online_n = [n - k if h else n for h in offline]

    def generate(counts: list[int]) -> Responses:
        if tools is None:
            return engine.generate(batch, counts, sampling)
        episode_tools = [partial(tools.episode, s.record, list(s.videos)) for s in samples]
        return engine.generate_episodes(batch, counts, sampling, episode_tools)

    groups = _streamed(generate, online_n, samples, reward_cfg)
    use_offline = list(offline)
    if mode == "below_threshold" and any(offline):
        # score the online part first; confident groups are completed online instead
        confident = confident_groups(groups, samples, reward_cfg, rollout_cfg.hybrid_threshold)
        use_offline = [h and not c for h, c in zip(offline, confident, strict=True)]
        extra = [k if h and not u else 0 for h, u in zip(offline, use_offline, strict=True)]
        if any(extra):
            more = _online(generate(extra), extra)
            groups = [g + m for g, m in zip(groups, more, strict=True)]
    for p, sample in enumerate(samples):
        if use_offline[p]:  # k copies of the one offline response
            groups[p] += [offline_response(engine, processor, batch, p, sample, sampling, tools)] * k
    return Groups(groups, sum(use_offline))


def _streamed(generate, counts: list[int], samples: list[MediaSample], reward_cfg) -> list[list[Response]]:
    """The online groups, generated in ``reward.judge.stream_chunks`` chunks of prompts when an
    endpoint judge scores them: each chunk's judge requests leave as soon as it is generated,
    so the judge answers while the next chunks generate (one chunk without a judge)."""
    judge = getattr(reward_cfg, "judge", None)
    chunks = judge.stream_chunks if judge is not None and judge.enabled else 1
    prompts = [p for p, c in enumerate(counts) if c]
    if chunks <= 1 or len(prompts) <= 1:
        return _online(generate(counts), counts)
    groups: list[list[Response]] = [[] for _ in counts]
    size = -(-len(prompts) // chunks)
    for start in range(0, len(prompts), size):
        part = set(prompts[start : start + size])
        mine = [c if p in part else 0 for p, c in enumerate(counts)]
        for p, group in enumerate(_online(generate(mine), mine)):
            if p in part:
                groups[p] = group
        flat = [(p, r) for p in sorted(part) for r in groups[p]]
        prefetch_judgements(
            [r.text for _, r in flat],
            [samples[p].record for p, _ in flat],
            [len(r.ids) for _, r in flat],
            reward_cfg,
        )
    return groups


def _online(responses: Responses, counts: list[int]) -> list[list[Response]]:
    """Generated responses (prompt order, ``counts[p]`` each) split into their groups."""
    if responses.episodes is not None:
        return _episodes(responses, counts)
    groups: list[list[Response]] = []
    row = 0
    for count in counts:
        group = []
        for _ in range(count):
            m = responses.mask[row].bool()
            logp = responses.logprobs[row][m] if responses.logprobs is not None else None
            group.append(
                Response(
                    responses.ids[row][m], responses.texts[row], False, bool(responses.truncated[row]), logp
                )
            )
            row += 1
        groups.append(group)
    return groups


def _episodes(responses: Responses, counts: list[int]) -> list[list[Response]]:
    """Episodes as responses: every token after the prompt, the policy's marked."""
    groups, row = [], 0
    for count in counts:
        group = []
        for _ in range(count):
            ep = responses.episodes[row]
            n = len(ep.ids)
            logp = responses.logprobs[row, :n] if responses.logprobs is not None else None
            group.append(
                Response(
                    torch.tensor(ep.ids, dtype=torch.long),
                    ep.final_text,
                    False,
                    bool(responses.truncated[row]),
                    logp,
                    policy=torch.tensor(ep.policy_mask, dtype=torch.long),
                    media=ep.tool_inputs or None,
                    types=ep.response_types(),
                    episode=ep,
                )
            )
            row += 1
        groups.append(group)
    return groups
