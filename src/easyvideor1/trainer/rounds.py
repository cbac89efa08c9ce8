"""A step's collection: collect -> score -> filter, then the greedy baseline (:func:`collect_step`),
with DAPO dynamic sampling: keep only groups whose rewards carry signal, drawing more prompts until
a step has its share of groups, and merging the kept groups of several rounds (:func:`merge_groups`).

A round's responses are scored as soon as they are collected, each share of a sequence-parallel
group its own (:func:`collect_round`): the filter judges a round by its scores, the endpoint
judge's answers were streamed while that share generated, and generating ahead
(``rollout.mode``) overlaps the scoring with the update.

Every rank draws every round, so the prompt samplers stay in step across ranks; the rounds end
when every rank has its share (decided jointly) or after ``max_tries`` rounds, and a rank that is
already full skips the rollouts of the extra rounds. The ranks of a sequence-parallel group hold
the same prompts: each round, each of them generates and scores a share of them, and the shares'
experiences are gathered and merged (:func:`merge_shares`), so the group decides as one.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import torch

from ..algorithms.filtering import DynamicSampler
from ..data.dataset import MediaSample, encode_prompts
from ..models.inputs import PromptBatch
from .advantages import needs_greedy_baseline
from .distributed import max_over_ranks, split_over_group
from .experience import Experience, pad_stack
from .metrics import reward_metrics
from .rollouts import collect
from .scoring import score, scored_experience
from .state import Step, StepContext
from .step_metrics import COUNT_METRICS


def collect_step(ctx: StepContext, engine_version: int) -> Step:
    """One step's rollouts on the engine's weights (``engine_version``): its prompts drawn, their
    groups collected and scored, filtered (``algorithm.online_filtering``, more rounds drawn as
    needed), and the greedy baseline generated when the estimator needs one. The rollout, reward
    and filter metrics go into ``step.metrics``; drawing and encoding time into ``step.times``."""
    t0 = time.perf_counter()
    if ctx.parts.tools is not None:  # tool answers are shared within a step, not across steps
        ctx.parts.tools.clear()
    step = Step(engine_version)
    step.samples, step.batch = ctx.draw(step.draws)
    step.times["data"] = time.perf_counter() - t0
    step.experience = collect_round(ctx, step.samples, step.batch)
    step.metrics.update(step.experience.metrics)
    step.metrics.update(reward_metrics(step.experience))  # rewards as sampled, before any filtering
    filter_groups(ctx, step)
    greedy_baseline(ctx, step)
    return step


def collect_round(ctx: StepContext, samples: list[MediaSample], batch: PromptBatch) -> Experience:
    """One round: the groups of ``samples`` collected (``rollouts.py``), then scored
    (``scoring.py``); each share of a sequence-parallel group collects and scores its own."""

    def share(batch, samples) -> Experience:
        groups = collect(ctx, batch, samples)
        exp = scored_experience(batch, samples, groups.responses, ctx.parts.engine.pad_id, ctx.cfg.reward)
        exp.metrics["hybrid/groups_with_offline"] = float(groups.with_offline)
        return dataclasses.replace(exp, batch=None)  # every rank holds the whole batch

    return merge_shares(split_over_group(share, batch, samples, ctx.parts.dist), batch)


def filter_groups(ctx: StepContext, step: Step) -> None:
    """DAPO dynamic sampling (``algorithm.online_filtering``): the step's groups whose rewards carry
    no signal are dropped and new prompts drawn, round after round, until
    ``trainer.prompts_per_step`` groups are kept or ``max_tries`` rounds have run; the step then
    holds the kept groups, their samples and batch."""
    f = ctx.cfg.algorithm.online_filtering
    if not f.enable:
        return

    def timed(fn):
        def run(*args):
            t = time.perf_counter()
            out = fn(*args)
            step.times["data"] += time.perf_counter() - t
            return out

        return run

    loader = ctx.data.train_set.loader
    encode = timed(lambda kept: encode_prompts(ctx.parts.processor, kept, ctx.cfg.data, loader))
    target = ctx.cfg.trainer.prompts_per_step // ctx.parts.dist.world  # this rank's share
    draw = timed(lambda: ctx.draw(step.draws))
    filter_rounds(step, f, target, draw, lambda samples, batch: collect_round(ctx, samples, batch), encode)


def greedy_baseline(ctx: StepContext, step: Step) -> None:
    """``step.greedy_scores``: ``[P]``, the score of one greedy response per prompt when the
    estimator declared it needs one (``GREEDY_BASELINE``, e.g. ReMax), generated with the rollouts,
    before the engine sleeps. The ranks of a sequence-parallel group generate and score a share
    each (:func:`split_over_group`)."""
    if not needs_greedy_baseline(ctx.cfg.algorithm):
        return
    greedy = dataclasses.replace(ctx.settings.sampling, temperature=0)

    def scored(batch, samples) -> torch.Tensor:
        out = ctx.parts.engine.generate(batch, [1] * len(samples), greedy)
        lengths = out.mask.sum(1).tolist()
        return score(out.texts, samples, list(range(len(samples))), lengths, ctx.cfg.reward).values["overall"]

    shares = split_over_group(scored, step.batch, step.samples, ctx.parts.dist)
    step.greedy_scores = torch.cat([s for s in shares if s is not None])


def merge_shares(shares: list[Experience | None], batch) -> Experience:
    """One experience of ``batch`` from the experiences of its contiguous shares of prompts (the
    ranks of a sequence-parallel group, :func:`~.distributed.split_over_group`; None: an empty
    share). Its metrics are the group's: counts summed, rates and means averaged over the shares
    that report them, as ``reduce_over_ranks`` treats ranks."""
    if len(shares) == 1:
        return dataclasses.replace(shares[0], batch=batch)
    pieces = [e for e in shares if e is not None]
    merged = merge_groups([(e, [], sorted(set(e.prompt_of))) for e in pieces], batch)
    keys = {k for e in pieces for k in e.metrics}
    reported = {k: [e.metrics[k] for e in pieces if k in e.metrics] for k in keys}
    merged.metrics = {
        k: sum(v) if k in COUNT_METRICS else sum(v) / len(v) for k, v in sorted(reported.items())
    }
    return merged


def filter_scores(exp: Experience) -> dict:
    """The scores the filter judges a group by: an unscored response (no judge verdict) counts
    as its group's mean over the scored ones, so it moves neither the group's mean nor its
    spread (a group with no scored response at all carries no signal: constant 0)."""
    if exp.unscored is None:
        return exp.scores
    out = {}
    for key, values in exp.scores.items():
        filled = values.clone()
        for p in set(exp.prompt_of):
            rows = [i for i, q in enumerate(exp.prompt_of) if q == p]
            scored = [i for i in rows if not exp.unscored[i]]
            fill = float(values[scored].mean()) if scored else 0.0
            for i in rows:
                if exp.unscored[i]:
                    filled[i] = fill
        out[key] = filled
    return out


def filter_rounds(
    step: Step,
    f,
    target: int,
    draw: Callable[[], tuple[list, object]],
    rollout: Callable[[list, object], Experience],
    encode: Callable[[list], object],
) -> None:
    """Rounds of dynamic sampling from the step's first round: the step then holds the kept
    groups' experience, their samples and their prompt batch; the filter metrics go into
    ``step.metrics``.

    ``draw()`` gives the next prompts, ``rollout`` samples and scores them, ``encode`` re-encodes
    the kept prompts as one batch. ``f`` is the ``algorithm.online_filtering`` config; ``target``
    this rank's number of groups. The bookkeeping is
    :class:`~easyvideor1.algorithms.filtering.DynamicSampler`'s; the rounds are counted here,
    since a rank that is already full still takes part in the others' rounds.
    """
    exp, samples, batch = step.experience, step.samples, step.batch
    sampler: DynamicSampler[tuple[Experience, list]] = DynamicSampler(
        target, max_tries=f.max_tries, criterion=f.criterion, low=f.low, high=f.high, key=f.key
    )
    last = (exp, samples, batch)  # the last round this rank rolled out
    current: Experience | None = exp
    rounds = 0
    while True:
        if current is not None:
            sampler.add_round(filter_scores(current), current.prompt_of, payload=(current, samples))
            last = (current, samples, batch)
        rounds += 1
        if not max_over_ranks(int(not sampler.done)) or (f.max_tries > 0 and rounds >= f.max_tries):
            break
        samples, batch = draw()
        current = rollout(samples, batch) if not sampler.done else None
    parts = []
    for sel in sampler.selection():
        part_exp, part_samples = sel.payload
        parts.append((part_exp, part_samples, sorted({part_exp.prompt_of[i] for i in sel.rows.tolist()})))
    kept = sum(len(keep) for _, _, keep in parts)
    step.metrics.update(
        {
            "filter/rounds": float(rounds),
            "filter/kept_groups": float(kept),
            "filter/dropped_groups": float(sampler.total_dropped_groups),
        }
    )
    if kept == 0:  # no group passed the filter: train on the last round as it is
        step.experience, step.samples, step.batch = last
        return
    step.samples = [s[p] for _, s, keep in parts for p in keep]
    step.batch = encode(step.samples)
    step.experience = merge_groups(parts, step.batch)


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
