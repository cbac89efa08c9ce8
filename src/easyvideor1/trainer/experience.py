"""One step's experience: prompts -> groups of responses (online and offline) -> scores -> advantages.

Hybrid groups: for a record with ``offline_output``, the group holds ``n - k`` generated responses
and ``k`` offline ones; only ``n - k`` are generated (the reference generated ``n`` and overwrote
one). Offline text is tokenised with the end-of-turn token appended and truncated to the response
limit (flagged), scored by the same reward function, and takes part in the group statistics. In
``below_threshold`` mode the ``n - k`` online responses are scored first; a group whose mean
accuracy reaches the threshold is completed with ``k`` more online responses instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import torch

from ..data.dataset import MediaSample
from ..models.inputs import PromptBatch
from ..rewards import prefetch_judgements, score_records
from ..rollout.base import Responses, RolloutEngine, SamplingConfig
from ..tools.session import ToolSession

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


def pad_stack(rows: list[torch.Tensor], pad: int) -> torch.Tensor:
    """Variable-length 1-D rows as one right-padded ``[N, T]`` tensor."""
    width = max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), max(width, 1)), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def tokenize_offline(tokenizer, text: str, eos_id: int, max_tokens: int) -> tuple[torch.Tensor, bool]:
    """Offline response ids with the end-of-turn token appended; truncated (flag True) to the limit."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [eos_id]
    truncated = len(ids) > max_tokens
    return torch.tensor(ids[:max_tokens], dtype=torch.long), truncated


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


def judge_counters(rows: list[dict]) -> dict[str, float]:
    """``reward/judge_*`` of one batch's results (empty when no result went to an endpoint judge)."""
    judged = [r for r in rows if "judge_cached" in r or "judge_error" in r]
    if not judged:
        return {}
    latency = [r["judge_latency_s"] for r in judged if "judge_latency_s" in r]
    return {
        "reward/judge_failures": float(sum(1 for r in judged if r.get("judge_error"))),
        "reward/judge_cache_hits": float(sum(1 for r in judged if r.get("judge_cached"))),
        "reward/judge_latency_s": sum(latency) / len(latency) if latency else 0.0,
        "reward/unscored": float(sum(1 for r in rows if r.get("unscored"))),
    }


def score(
    texts: list[str], samples: list[MediaSample], prompt_of: list[int], lengths: list[int], reward_cfg
) -> Scores:
    """Rewards of each response from the record it answers, scored as one batch
    (``rewards.score_records``: expensive tasks in its process pool, judged ones asked of the
    endpoint concurrently); validation uses it too."""
    records = [samples[p].record for p in prompt_of]
    rows = score_records(texts, records, lengths, reward_cfg)
    values = {k: torch.tensor([float(r[k]) for r in rows], dtype=torch.float32) for k in SCORE_KEYS}
    unscored = torch.tensor([bool(r.get("unscored")) for r in rows], dtype=torch.bool)
    errors = sum(1 for r in rows if r.get("error"))
    return Scores(values, [r["task"] for r in rows], errors, unscored, judge_counters(rows))


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


def _confident(
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


def collect(
    engine: RolloutEngine,
    processor,
    batch: PromptBatch,
    samples: list[MediaSample],
    rollout_cfg,
    sampling: SamplingConfig,
    reward_cfg,
    tools: ToolSession | None = None,
) -> Experience:
    """Generate, add offline responses, and score: the groups of one step (prompt order kept).
    With ``tools`` every generated response is an episode (``rollout/episode.py``)."""
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
        confident = _confident(groups, samples, reward_cfg, rollout_cfg.hybrid_threshold)
        use_offline = [h and not c for h, c in zip(offline, confident, strict=True)]
        extra = [k if h and not u else 0 for h, u in zip(offline, use_offline, strict=True)]
        if any(extra):
            more = _online(generate(extra), extra)
            groups = [g + m for g, m in zip(groups, more, strict=True)]
    for p, sample in enumerate(samples):
        if use_offline[p]:  # k copies of the one offline response
            groups[p] += [offline_response(engine, processor, batch, p, sample, sampling, tools)] * k
    exp = _experience(batch, samples, groups, engine.pad_id, reward_cfg)
    exp.metrics["hybrid/groups_with_offline"] = float(sum(use_offline))
    return exp


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


def stacked(batch: PromptBatch, groups: list[list[Response]], pad_id: int) -> Experience:
    """The groups as padded tensors (scores left empty): what a forward over them needs."""
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


def _experience(
    batch: PromptBatch, samples: list[MediaSample], groups: list[list[Response]], pad_id: int, reward_cfg
) -> Experience:
    """The groups as padded tensors, scored."""
    exp = stacked(batch, groups, pad_id)
    scored = score(exp.texts, samples, exp.prompt_of, exp.mask.sum(1).tolist(), reward_cfg)
    exp.scores, exp.tasks = scored.values, scored.tasks
    exp.metrics["reward/errors"] = float(scored.errors)
    exp.metrics.update(scored.judge)
    if scored.unscored is not None and bool(scored.unscored.any()):
        exp.unscored = scored.unscored
    flat = [r for group in groups for r in group]
    if any(r.episode is not None for r in flat):  # reward.tools: shaping by the episode's tool use
        shaping = torch.tensor(
            [reward_cfg.tools.shaping(r.episode.counts) if r.episode else 0.0 for r in flat]
        )
        exp.scores["overall"] = exp.scores["overall"] + shaping
        exp.metrics["reward/tool_shaping"] = float(shaping.mean())
    # the policy's own episodes (offline ones replay given turns: not the policy's tool use)
    episodes = [r.episode for r in flat if r.episode is not None and not r.offline]
    if episodes:
        exp.metrics.update(tool_metrics(episodes))
    return exp


def tool_metrics(episodes: list) -> dict[str, float]:
    """``tools/*`` of a step's episodes: calls, invalid calls and errors per episode, tool turns,
    the share of episodes that called a tool and that answered."""
    n = max(len(episodes), 1)
    return {
        "tools/calls_per_episode": sum(e.counts["calls"] for e in episodes) / n,
        "tools/invalid_calls": float(sum(e.counts["invalid_calls"] for e in episodes)),
        "tools/errors": float(sum(e.counts["errors"] for e in episodes)),
        "tools/turns_per_episode": sum(e.tool_turns for e in episodes) / n,
        "tools/call_rate": sum(1 for e in episodes if e.counts["calls"]) / n,
        "tools/answered_rate": sum(1 for e in episodes if e.finish == "answer") / n,
    }


def merge_groups(
    parts: list[tuple[Experience, list[MediaSample], list[int]]], batch: PromptBatch
) -> Experience:
    """One experience from the chosen groups of several rounds.

    ``parts`` holds (experience, its samples, the prompt indices to keep); ``batch`` encodes the kept
    samples in the same order. Responses do not depend on how the prompts were padded, so they are
    carried over as they are; log-probs are computed afterwards on the merged batch.
    """
    rows, prompt_of = [], []
    new_p = 0
    for exp, _, keep in parts:
        for p in keep:
            for i, q in enumerate(exp.prompt_of):
                if q == p:
                    rows.append((exp, i))
                    prompt_of.append(new_p)
            new_p += 1
    lengths = [int(e.real[i].sum()) for e, i in rows]  # responses are right-padded
    ids = pad_stack([e.ids[i][:n] for (e, i), n in zip(rows, lengths, strict=True)], 0)
    mask = pad_stack([e.mask[i][:n] for (e, i), n in zip(rows, lengths, strict=True)], 0)
    extra = {}
    if any(e.valid is not None for e, _ in rows):
        extra = dict(
            valid=pad_stack([torch.ones(n, dtype=torch.long) for n in lengths], 0),
            response_media=[e.response_media[i] if e.response_media else None for e, i in rows],
            response_types=None
            if all(e.response_types is None for e, _ in rows)
            else pad_stack(
                [
                    e.response_types[i][:n]
                    if e.response_types is not None
                    else torch.zeros(n, dtype=torch.long)
                    for (e, i), n in zip(rows, lengths, strict=True)
                ],
                0,
            ),
        )
    merged = Experience(
        batch=batch,
        prompt_of=prompt_of,
        ids=ids,
        mask=mask,
        texts=[e.texts[i] for e, i in rows],
        offline=torch.tensor([bool(e.offline[i]) for e, i in rows]),
        truncated=torch.tensor([bool(e.truncated[i]) for e, i in rows]),
        scores={k: torch.stack([e.scores[k][i] for e, i in rows]) for k in parts[0][0].scores},
        tasks=[e.tasks[i] for e, i in rows],
        rollout_logp=_merge_rollout_logp(rows, ids.shape),
        unscored=None
        if all(e.unscored is None for e, _ in rows)
        else torch.tensor([bool(e.unscored[i]) if e.unscored is not None else False for e, i in rows]),
        **extra,
    )
    for key in parts[0][0].metrics:
        merged.metrics[key] = sum(e.metrics.get(key, 0.0) for e, _, _ in parts)
    return merged


def _merge_rollout_logp(rows: list[tuple[Experience, int]], shape) -> torch.Tensor | None:
    if all(e.rollout_logp is None for e, _ in rows):
        return None
    out = torch.full(shape, float("nan"))
    for j, (e, i) in enumerate(rows):
        if e.rollout_logp is not None:
            n = int(e.real[i].sum())
            out[j, :n] = e.rollout_logp[i, :n]
    return out
