"""A step's rollouts (:func:`collect_groups`) and DAPO dynamic sampling: keep only groups whose
rewards carry signal, drawing more prompts until a step has its share of groups.

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

from ..algorithms.filtering import DynamicSampler
from ..data.dataset import encode_prompts
from ..rollout.base import SamplingConfig
from .distributed import max_over_ranks, split_over_group
from .experience import Experience, collect, merge_groups
from .metrics import reward_metrics
from .state import Components
from .step import COUNT_METRICS


def collect_groups(
    cfg,
    parts: Components,
    sampling: SamplingConfig,
    loader,
    draw: Callable[[], tuple[list, object]],
    metrics: dict[str, float],
) -> tuple[Experience, list, object, float]:
    """Rollouts for one step: (experience, its samples, their prompt batch, seconds spent on data).

    ``draw()`` gives this rank's next prompts (samples and their encoded batch); ``loader`` loads
    the training set's media for re-encoding. With DAPO dynamic sampling
    (``algorithm.online_filtering``), groups whose rewards carry no signal are dropped and new
    prompts are drawn, round after round, until ``trainer.prompts_per_step`` groups are kept or
    ``max_tries`` rounds have run. The rollout, reward and filter metrics go into ``metrics``.
    """
    t0 = time.perf_counter()
    if parts.tools is not None:  # tool answers are shared within a step, not across steps
        parts.tools.clear()
    samples, batch = draw()
    data_time = [time.perf_counter() - t0]

    def rollout(samples, batch) -> Experience:
        def share(batch, samples) -> Experience:
            exp = collect(
                parts.engine,
                parts.processor,
                batch,
                samples,
                cfg.rollout,
                sampling,
                cfg.reward,
                parts.tools,
            )
            return dataclasses.replace(exp, batch=None)  # every rank holds the whole batch

        return merge_shares(split_over_group(share, batch, samples, parts.dist), batch)

    exp = rollout(samples, batch)
    metrics.update(exp.metrics)
    metrics.update(reward_metrics(exp))  # rewards as sampled, before any filtering
    f = cfg.algorithm.online_filtering
    if not f.enable:
        return exp, samples, batch, data_time[0]

    def timed(fn):
        def run(*args):
            t = time.perf_counter()
            out = fn(*args)
            data_time[0] += time.perf_counter() - t
            return out

        return run

    encode = timed(lambda kept: encode_prompts(parts.processor, kept, cfg.data, loader))
    target = cfg.trainer.prompts_per_step // parts.dist.world  # this rank's share
    exp, samples, batch, filtered = filter_rounds(
        exp, samples, batch, f, target, timed(draw), rollout, encode
    )
    metrics.update(filtered)
    return exp, samples, batch, data_time[0]


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
    exp: Experience,
    samples: list,
    batch,
    f,
    target: int,
    draw: Callable[[], tuple[list, object]],
    rollout: Callable[[list, object], Experience],
    encode: Callable[[list], object],
) -> tuple[Experience, list, object, dict[str, float]]:
    """(experience of the kept groups, their samples, their prompt batch, filter metrics).

    ``exp`` is the first round's experience; ``draw()`` gives the next prompts, ``rollout`` samples
    and scores them, ``encode`` re-encodes the kept prompts as one batch. ``f`` is the
    ``algorithm.online_filtering`` config; ``target`` this rank's number of groups. The bookkeeping
    is :class:`~easyvideor1.algorithms.filtering.DynamicSampler`'s; the rounds are counted here,
    since a rank that is already full still takes part in the others' rounds.
    """
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
    metrics = {
        "filter/rounds": float(rounds),
        "filter/kept_groups": float(kept),
        "filter/dropped_groups": float(sampler.total_dropped_groups),
    }
    if kept == 0:  # no group passed the filter: train on the last round as it is
        return (*last, metrics)
    kept_samples = [s[p] for _, s, keep in parts for p in keep]
    batch = encode(kept_samples)
    return merge_groups(parts, batch), kept_samples, batch, metrics
