"""The stages of one RL step after the rollouts, over its :class:`Experience`: old and reference
log-probs, the KL controller, advantages, the update, and the step's metrics reduced over ranks.

``Trainer.rl_step`` (``loop.py``) runs them in order; each takes the pieces it uses and returns
its result.
"""

from __future__ import annotations

import torch

from ..algorithms.kl import kl_penalty
from ..algorithms.rollout_correction import rollout_correction
from ..models.inputs import compute_device, pixels_to_device
from ..models.lora import reference_forward
from ..rollout.base import SamplingConfig
from .advantages import greedy_scores, needs_greedy_baseline, step_advantages
from .distributed import DistState, all_gather, reduce_over_ranks, sum_over_ranks
from .experience import Experience
from .state import Components, DataSkips
from .update import UpdateSettings, experience_logprobs, policy_update

# metrics that count things per step (summed over ranks; every other metric is averaged)
COUNT_METRICS = (
    "reward/errors",
    "reward/judge_failures",
    "reward/judge_cache_hits",
    "reward/unscored",
    "hybrid/groups_with_offline",
    "hybrid/offline_truncated",
    "filter/kept_groups",
    "filter/dropped_groups",
    "data/dropped_overlong",
    "data/skipped_records",
)


def logprobs(
    parts: Components,
    exp: Experience,
    update: UpdateSettings,
    kl_reference: bool,
    reference_from_warmup: bool,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """(old log-probs, reference log-probs or None, the old policy's entropy) of the responses.

    With a frozen vision tower the feature cache is started here and serves every forward until
    the update ends (:func:`run_update` stops it). The reference is the reference model, or with
    LoRA the policy itself with its adapter disabled (or swapped for the warm-up's).
    """
    temperature, mb, banned = update.temperature, update.micro_batch_size, parts.engine.banned
    # the step's pixels go to the device once, here: every micro-batch of the old, reference and
    # update forwards takes its rows from that copy (a prompt's n sequences, several PPO epochs)
    # instead of copying them from the host again; the caller's batch stays on the host
    device = compute_device(parts.model)
    exp.batch, exp.response_media = pixels_to_device(exp.batch, exp.response_media, device)
    if parts.vision_cache is not None:
        parts.vision_cache.start(exp.batch, exp.response_media)  # episodes: their tool media too
    speed = dict(
        padding_free=update.padding_free,
        max_tokens=update.max_tokens_per_micro_batch,
        vision=parts.vision_cache,
    )
    old, entropy = experience_logprobs(parts.model, exp, banned, parts.dummy, temperature, mb, **speed)
    ref = None
    if parts.ref_model is not None:
        ref, _ = experience_logprobs(parts.ref_model, exp, banned, parts.ref_dummy, temperature, mb, **speed)
    elif kl_reference:
        snapshot = parts.lora_reference if reference_from_warmup else None
        with reference_forward(parts.model, snapshot):
            ref, _ = experience_logprobs(parts.model, exp, banned, parts.dummy, temperature, mb, **speed)
    return old, ref, entropy


def feed_kl_controller(alg, kl_ctl, exp: Experience) -> dict[str, float]:
    """Feed this step's KL (totalled over ranks) to the KL controller ``kl_ctl``; returns the
    ``actor/kl_coef`` metric. The caller passes the new ``kl_ctl.value`` on to the loss.

    The controller is fed the token mean of the per-token KL over the whole batch (every response
    token weighs the same, a long response more than a short one). veRL feeds the mean over
    sequences of each sequence's token-mean KL (every sequence weighs the same). The two are equal
    when all responses have the same length; with mixed lengths an adaptive ``kl.target`` carried
    over from a veRL run reacts to the long responses' KL more here."""
    kl = kl_penalty(exp.old_logp, exp.ref_logp, alg.kl.type, exp.mask)
    local = {"kl": float((kl * exp.mask).sum()), "tokens": float(exp.mask.sum()), "n": float(len(exp))}
    totals = sum_over_ranks(local)
    kl_ctl.update(totals["kl"] / max(totals["tokens"], 1.0), int(totals["n"]))
    return {"actor/kl_coef": kl_ctl.value}


def greedy_baseline(cfg, engine, sampling: SamplingConfig, dist: DistState, batch, samples: list):
    """``[P]`` scores of one greedy response per prompt when the estimator declared it needs them
    (e.g. ReMax), else None: generated with the rollouts, before the engine sleeps for the update."""
    if not needs_greedy_baseline(cfg.algorithm):
        return None
    return greedy_scores(engine, batch, samples, sampling, cfg.reward, dist)


def advantages(cfg, dist: DistState, exp: Experience, rewards: torch.Tensor, samples: list, baseline):
    """Advantages of the shaped ``rewards``, with the extra inputs the estimator declared
    (``baseline``: :func:`greedy_baseline`'s scores)."""
    return step_advantages(cfg.algorithm, exp, rewards, samples, baseline, dist)


def leave_out_unscored(exp: Experience) -> None:
    """Take the responses without a reward (``exp.unscored``: the judge gave no verdict) out of
    the loss, after the advantages left them out of their groups. They stay in the forward
    (``exp.valid``), so the micro-batches and every other row are unchanged."""
    if exp.unscored is None:
        return
    if exp.valid is None:
        exp.valid = exp.mask.clone()
    exp.mask = exp.mask * (~exp.unscored).to(exp.mask.dtype).unsqueeze(1)


def correct_rollouts(alg, exp: Experience) -> dict[str, float]:
    """``algorithm.rollout_correction``: the importance weights of the engine-sampled tokens
    (``pi_old / pi_rollout``, from the engine's log-probs) into ``exp.is_weights``; ``mis`` also
    takes the tokens it drops out of ``exp.mask`` (the loss and its denominators). After the
    advantages: a dropped sequence still counted in its group's baseline."""
    if alg.rollout_correction == "none":
        return {}
    if exp.rollout_logp is None:
        raise RuntimeError(
            f"algorithm.rollout_correction={alg.rollout_correction}: the engine returned no log-probs"
        )
    corr = rollout_correction(
        exp.old_logp,
        exp.rollout_logp,
        exp.mask,
        alg.rollout_correction,
        alg.rollout_correction_level,
        alg.rollout_correction_cap,
        alg.rollout_correction_lower,
    )
    exp.is_weights = corr.weights
    if exp.valid is None:  # dropped tokens leave the loss, not the forward: later tokens still see them
        exp.valid = exp.mask.clone()
    exp.mask = exp.mask * corr.keep.to(exp.mask.dtype)
    return corr.metrics


def mini_batches(prompt_of: list[int], per_mini: int, ppo_epochs: int) -> list[list[int]]:
    """Sequence indices of each mini-batch of ``per_mini`` prompts (this rank's share), PPO epoch
    after PPO epoch (whole groups together)."""
    groups = sorted(set(prompt_of))
    mini = []
    for _ in range(ppo_epochs):
        for g in range(0, len(groups), per_mini):
            chosen = set(groups[g : g + per_mini])
            mini.append([i for i, p in enumerate(prompt_of) if p in chosen])
    return mini


def run_update(parts: Components, exp: Experience, mini: list[list[int]], update: UpdateSettings) -> dict:
    """The PPO epochs over mini-batches and micro-batches (metrics already global)."""
    try:
        return policy_update(
            parts.model,
            parts.optimizer,
            parts.scheduler,
            exp,
            mini,
            update,
            parts.engine.banned,
            parts.dummy,
            vision=parts.vision_cache,
        )
    finally:
        if parts.vision_cache is not None:
            parts.vision_cache.stop()  # the next step's weights and media differ


def reduce_metrics(
    metrics: dict,
    exp: Experience,
    batch,
    times: dict[str, float],
    skips: DataSkips,
    cfg,
    dist: DistState,
) -> dict[str, float]:
    """The step's metrics with times, data counters and throughput, reduced over ranks
    (counts summed, rates and means averaged)."""
    metrics.update({f"time/{k}": v for k, v in times.items()})
    if cfg.data.preflight == "fast":
        metrics["data/dropped_overlong"] = float(skips.dropped_overlong)  # so far, this rank
    # records left out so far: start-up's (counted once, on rank 0) plus this rank's since
    metrics["data/skipped_records"] = float(
        skips.skipped_at_step + (skips.skipped_preflight if dist.is_main else 0)
    )
    tokens = int(exp.mask.sum()) + int(batch.inputs["attention_mask"].sum()) * cfg.rollout.n
    per_rank = all_gather(tokens)  # [tokens] in one process
    if dist.enabled:
        metrics["perf/rank_token_imbalance"] = max(per_rank) / max(sum(per_rank) / len(per_rank), 1)
    metrics = reduce_over_ranks(metrics, summed=COUNT_METRICS)
    metrics["perf/tokens_per_s"] = sum(per_rank) / times["step"]
    return metrics
