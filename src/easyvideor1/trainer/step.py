"""The stages of one RL step after its rollouts, each a function of ``(ctx, step)``: the
:class:`~.state.StepContext` it reads and the :class:`~.state.Step` record it fills.

``Trainer.rl_step`` (``loop.py``) runs them in the README's order, after collection
(``rounds.py``: collect -> score -> filter, with the greedy baseline): :func:`logprobs` ->
:func:`shape` -> :func:`advantages` -> :func:`mask` -> :func:`update` -> :func:`metrics`.
"""

from __future__ import annotations

from ..algorithms.distill import DistillInputs, distill_advantages
from ..algorithms.kl import kl_penalty
from ..algorithms.masked import masked_mean
from ..algorithms.rollout_correction import rollout_correction
from ..algorithms.shaping import shape_rewards
from ..models.inputs import compute_device, pixels_to_device
from ..models.lora import reference_forward
from .advantages import step_advantages
from .distributed import all_gather, reduce_over_ranks, sum_over_ranks
from .experience import Experience
from .metrics import hybrid_metrics, mismatch_metrics
from .state import Step, StepContext
from .step_metrics import COUNT_METRICS
from .update import experience_logprobs, policy_update, prefix_tokens_saved


def logprobs(ctx: StepContext, step: Step) -> None:
    """The old log-probs, the reference log-probs (None without KL), the distillation teacher's
    (None without one) and the old policy's entropy of the responses, into the experience and
    ``step.entropy``.

    With a frozen vision tower the feature cache is started here and serves every forward until
    the update ends (:func:`update` stops it). The reference is the reference model, or with
    LoRA the policy itself with its adapter disabled (or swapped for the warm-up's).
    """
    parts, exp = ctx.parts, step.experience
    forward = parts.forward
    # the step's pixels go to the device once, here: every micro-batch of the old, reference and
    # update forwards takes its rows from that copy (a prompt's n sequences, several PPO epochs)
    # instead of copying them from the host again; the caller's batch stays on the host
    exp.batch, exp.response_media = pixels_to_device(
        exp.batch, exp.response_media, compute_device(forward.model)
    )
    if forward.vision is not None:
        forward.vision.start(exp.batch, exp.response_media)  # episodes: their tool media too
    exp.old_logp, step.entropy = experience_logprobs(forward, exp)
    step.metrics["perf/prefix_tokens_saved"] = prefix_tokens_saved(exp, forward.packing)
    if ctx.settings.kl_reference and parts.ref_forward is not None:
        exp.ref_logp, _ = experience_logprobs(parts.ref_forward, exp)
    elif ctx.settings.kl_reference:
        snapshot = parts.lora_reference if ctx.state.reference_moved else None
        with reference_forward(forward.model, snapshot):
            exp.ref_logp, _ = experience_logprobs(forward, exp)
    if parts.teacher is not None:
        exp.teacher = parts.teacher.signal(ctx, step)
    parts.handoff.mark("after_logprobs")


def shape(ctx: StepContext, step: Step) -> None:
    """The shaped rewards (``step.rewards``): overlong penalty and KL-in-reward on the ``overall``
    scores, with the KL coefficient this step's rollouts were made under; then the KL controller
    is fed this step's KL (the loss reads its new coefficient), and the rollout/trainer log-prob
    mismatch is measured."""
    exp, alg, kl_ctl = step.experience, ctx.cfg.algorithm, ctx.parts.kl_ctl
    shaped = shape_rewards(
        exp.scores["overall"],
        exp.mask,
        alg,
        max_response_length=ctx.settings.sampling.max_new_tokens,
        kl_coef=kl_ctl.value,
        log_prob=exp.old_logp,
        ref_log_prob=exp.ref_logp,
    )
    step.rewards = shaped.rewards
    step.metrics.update(shaped.metrics)
    if ctx.settings.kl_reference:
        step.metrics.update(feed_kl_controller(alg, kl_ctl, exp))
    step.metrics.update(mismatch_metrics(exp))


def feed_kl_controller(alg, kl_ctl, exp: Experience) -> dict[str, float]:
    """Feed this step's KL (totalled over ranks) to the KL controller ``kl_ctl``; returns the
    ``actor/kl_coef`` metric. The update reads the new ``kl_ctl.value``.

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


def advantages(ctx: StepContext, step: Step) -> None:
    """The advantages of the shaped rewards, with the extra inputs the estimator declared (the
    greedy baseline's scores the collection generated); with a teacher, the distillation
    objective's advantages made of them (``algorithm.distill``)."""
    exp, alg = step.experience, ctx.cfg.algorithm
    exp.advantages = step_advantages(alg, exp, step.rewards, step.samples, step.greedy_scores, ctx.parts.dist)
    if exp.teacher is not None:
        dc = alg.distill
        inputs = DistillInputs(exp.advantages, exp.old_logp, exp.teacher, exp.mask, ctx.state.step)
        out = distill_advantages(dc.objective, inputs, dc.reward_weight, dc.coef, dc.objective_arguments())
        exp.advantages = out.advantages
        step.metrics.update(out.metrics)
    step.metrics.update(hybrid_metrics(exp))


def mask(ctx: StepContext, step: Step) -> None:
    """The loss mask after the advantages: unscored responses out, rollout correction's weights
    and dropped tokens in; the old policy's entropy over what remains is logged."""
    exp = step.experience
    leave_out_unscored(exp)
    step.metrics.update(correct_rollouts(ctx.cfg.algorithm, exp))
    step.metrics["actor/entropy_rollout"] = float(masked_mean(step.entropy, exp.mask.bool()))


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


def update(ctx: StepContext, step: Step) -> None:
    """The PPO epochs over mini-batches and micro-batches, the loss's KL coefficient read from the
    KL controller (``step.update_metrics``: the update's metrics, already global)."""
    parts, tc = ctx.parts, ctx.cfg.trainer
    exp = step.experience
    mini = mini_batches(exp.prompt_of, tc.mini_batch_prompts // parts.dist.data_world, tc.ppo_epochs)
    try:
        step.update_metrics = policy_update(
            parts.forward,
            parts.optimizer,
            parts.scheduler,
            exp,
            mini,
            ctx.settings.update,
            parts.kl_ctl.value,
        )
    finally:
        if parts.forward.vision is not None:
            parts.forward.vision.stop()  # the next step's weights and media differ


def metrics(ctx: StepContext, step: Step) -> dict[str, float]:
    """The step's metrics with memory, times, data counters and throughput, reduced over ranks
    (counts summed, rates and means averaged), then the update's (global already)."""
    cfg, dist, skips, exp = ctx.cfg, ctx.parts.dist, ctx.skips, step.experience
    out = dict(step.metrics)
    out.update({f"memory/{phase}_gib": gib for phase, gib in ctx.parts.handoff.memory.items()})
    out.update({f"time/{k}": v for k, v in step.times.items()})
    if cfg.data.preflight == "fast":
        out["data/dropped_overlong"] = float(skips.dropped_overlong)  # so far, this rank
    # records left out so far: start-up's (counted once, on rank 0) plus this rank's since
    out["data/skipped_records"] = float(
        skips.skipped_at_step + (skips.skipped_preflight if dist.is_main else 0)
    )
    tokens = int(exp.mask.sum()) + int(step.batch.inputs["attention_mask"].sum()) * cfg.rollout.n
    per_rank = all_gather(tokens)  # [tokens] in one process
    if dist.enabled:
        out["perf/rank_token_imbalance"] = max(per_rank) / max(sum(per_rank) / len(per_rank), 1)
    out = reduce_over_ranks(out, summed=COUNT_METRICS)
    out["perf/tokens_per_s"] = sum(per_rank) / step.times["step"]
    out.update(step.update_metrics)
    return out
