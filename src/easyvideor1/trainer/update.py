"""Log-probs over an experience, and the PPO-style policy update with exact loss weighting."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..algorithms.aggregation import GlobalBatchStats, aggregate_loss
from ..algorithms.kl import kl_loss
from ..algorithms.policy_losses import compute_policy_loss
from ..models.inputs import gather_prompts, gather_sequences, media_counts, merge_media
from ..models.logprobs import Packing, PolicyForward, Readout, ResponseRows
from .distributed import data_group, max_over_ranks, sum_over_ranks
from .experience import Experience


@dataclass(frozen=True)
class UpdateSettings:
    """What the run config fixes for every update (the forward's settings are its
    :class:`~easyvideor1.models.logprobs.PolicyForward`'s; the KL coefficient is the controller's,
    passed to each update)."""

    policy_loss: str = "ppo"
    loss_options: dict | None = None  # clip ratios etc., passed to the policy loss
    loss_agg_mode: str = "token-mean"
    norm_length: int = 64
    kl_in_loss: bool = False  # the KL to the reference is a loss term (``algorithm.kl.apply_as=loss``)
    kl_kind: str = "k3"
    max_grad_norm: float = 1.0
    offline_shaping: float = 0.0  # LUFFY-style policy shaping gamma for offline responses (0 = off)
    distill_loss: str = ""  # a ``loss`` distillation objective (``gkd``): its term joins the loss
    distill_coef: float = 0.0  # and its weight (``algorithm.distill.coef``)


def global_stats(masks: list[torch.Tensor]) -> GlobalBatchStats:
    """The optimizer step's loss denominators, summed over the ranks that hold different data;
    ``dp_size`` is every rank FSDP averages gradients over (with sequence parallelism the ranks of
    a group hold the same sequences and each contributes its own tokens' share of the gradient)."""
    stats = GlobalBatchStats.from_masks(masks).all_reduce(data_group())
    if dist.is_available() and dist.is_initialized():
        stats = dataclasses.replace(stats, dp_size=dist.get_world_size())
    return stats


def micro_batches(indices: list[int], size: int) -> list[list[int]]:
    return [indices[i : i + size] for i in range(0, len(indices), size)]


def sequence_tokens(exp: Experience, idx: list[int]) -> list[int]:
    """Real tokens of each sequence: its prompt without padding (media placeholders included)
    plus its response."""
    prompt = exp.batch.inputs["attention_mask"].sum(1)
    real = exp.real
    return [int(prompt[exp.prompt_of[i]]) + int(real[i].sum()) for i in idx]


def forward_tokens(exp: Experience, idx: list[int], packing: Packing) -> int:
    """Tokens the language model computes in one forward of the sequences ``idx``: rows times the
    widest row when padded (prompts are padded to the step's longest prompt), the real tokens
    when packed, each prompt once when its prefix is shared."""
    prompt = exp.batch.inputs["attention_mask"].sum(1)
    prompts = [exp.prompt_of[i] for i in idx]
    responses = exp.real[idx].sum(1).tolist()  # one tensor op: the token budget calls this per sequence
    if packing.shares(prompts):
        return sum(responses) + sum(int(prompt[p]) for p in dict.fromkeys(prompts))
    if packing.padding_free:
        return sum(responses) + sum(int(prompt[p]) for p in prompts)
    return len(idx) * (exp.batch.inputs["input_ids"].shape[1] + max(responses, default=0))


def token_micro_batches(exp: Experience, indices: list[int], max_tokens: int, packing: Packing):
    """Consecutive micro-batches whose forward computes at most ``max_tokens`` tokens
    (:func:`forward_tokens`). A sequence over the budget on its own forms a micro-batch alone (it
    cannot be split). The loss does not depend on the split (GlobalBatchStats), so this changes
    memory and speed only.
    """
    out: list[list[int]] = []
    current: list[int] = []
    for i in indices:
        if current and forward_tokens(exp, [*current, i], packing) > max_tokens:
            out.append(current)
            current = []
        current.append(i)
    if current:
        out.append(current)
    return out


def split_micro_batches(exp: Experience, indices: list[int], packing: Packing) -> list[list[int]]:
    """The micro-batches of ``indices``: by token budget when one is set, else by count."""
    if packing.max_tokens > 0:
        return token_micro_batches(exp, indices, packing.max_tokens, packing)
    return micro_batches(indices, packing.micro_batch_size)


def prefix_tokens_saved(exp: Experience, packing: Packing) -> float:
    """The share of language-model tokens a pass over ``exp`` does not compute because prompts are
    shared (0 without sharing): each micro-batch's real tokens, every sequence's prompt counted,
    against the same with each shared prompt counted once."""
    full = shared = 0
    for idx in split_micro_batches(exp, list(range(len(exp))), packing):
        alone = forward_tokens(exp, idx, dataclasses.replace(packing, padding_free=True, shared_prefix="off"))
        full += alone
        shared += (
            forward_tokens(exp, idx, packing) if packing.shares([exp.prompt_of[i] for i in idx]) else alone
        )
    return 1.0 - shared / max(full, 1)


def response_rows(
    exp: Experience, idx: list[int], shared: bool = False
) -> tuple[ResponseRows, torch.Tensor, int]:
    """The sequences ``idx`` as one forward's rows, with their loss mask and width (all cut to the
    longest response): prompt rows (with each episode's tool media after its prompt's) and
    responses. The forward attends every real token (an episode's tool turns too); the loss mask
    holds the policy's. ``shared``: one row per prompt, read once by its sequences
    (``models/shared_prefix.py``)."""
    real = exp.real
    width = int(real[idx].sum(1).max())  # responses are right-padded
    if shared:
        prompts = list(dict.fromkeys(exp.prompt_of[i] for i in idx))
        blocks = [prompts.index(exp.prompt_of[i]) for i in idx]
        members = [[i for i, b in zip(idx, blocks, strict=True) if b == row] for row in range(len(prompts))]
    else:
        prompts = [exp.prompt_of[i] for i in idx]
        blocks, members = None, [[i] for i in idx]
    counts = ([exp.batch.video_counts[p] for p in prompts], [exp.batch.image_counts[p] for p in prompts])
    own_counts = None
    if exp.response_media is None:
        inputs = gather_prompts(exp.batch, prompts)
    else:  # an episode's media: its prompt's, then its tool turns' (each of the row's sequences')
        inputs = gather_sequences(
            exp.batch, prompts, [merge_media([exp.response_media[i] for i in m]) for m in members]
        )
        tool = {i: media_counts(exp.response_media[i]) for i in idx}
        own_counts = ([tool[i][0] for i in idx], [tool[i][1] for i in idx])
        counts = tuple(
            [c + sum(tool[i][k] for i in m) for c, m in zip(counts[k], members, strict=True)] for k in (0, 1)
        )
    rows = ResponseRows(
        inputs,
        exp.ids[idx, :width],
        real[idx, :width],
        media_counts=counts,
        prompt_ids=prompts,
        sequence_ids=None if exp.response_media is None else (members if shared else idx),
        types=None if exp.response_types is None else exp.response_types[idx, :width],
        blocks=blocks,
        own_counts=own_counts if shared else None,
    )
    return rows, exp.mask[idx, :width], width


def padded(chunks: list[list[int]]) -> list[tuple[list[int], bool]]:
    """``chunks`` as (indices, real) pairs, plus filler chunks up to the most any rank has.

    Under FSDP every forward is a collective, so all ranks must run the same number of them. A rank
    with fewer micro-batches re-runs its first sequence as a filler whose result is discarded
    (zero-weighted in the loss). Without a process group this returns the chunks as they are.
    """
    out = [(c, True) for c in chunks]
    filler = chunks[0][:1] if chunks and chunks[0] else [0]
    out += [(filler, False)] * (max_over_ranks(len(chunks)) - len(chunks))
    return out


@torch.no_grad()
def experience_logprobs(forward: PolicyForward, exp: Experience) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probs ``[N, T]`` and entropy of every response under ``forward``'s model (no
    gradient), micro-batch after micro-batch as its packing says."""
    read = experience_readout(forward, exp)
    return read.logp, read.entropy


@torch.no_grad()
def experience_readout(forward: PolicyForward, exp: Experience, top_k: int = 0) -> Readout:
    """:func:`experience_logprobs` with, for ``top_k > 0``, the model's ``top_k`` most likely ids
    and their log-probs at every response position (``[N, T, top_k]``: a teacher's), on the host."""
    shape = exp.ids.shape
    out = Readout(torch.zeros(shape), torch.zeros(shape))
    if top_k:
        out.top_ids = torch.zeros((*shape, top_k), dtype=torch.long)
        out.top_logp = torch.zeros((*shape, top_k))
    for idx, real in padded(split_micro_batches(exp, list(range(len(exp))), forward.packing)):
        rows, mask, width = response_rows(exp, idx, forward.packing.shares([exp.prompt_of[i] for i in idx]))
        read = forward.readout(dataclasses.replace(rows, top_k=top_k))
        if not real:
            continue
        m = mask.bool()
        out.logp[idx, :width] = torch.where(m, read.logp.cpu(), 0.0)
        out.entropy[idx, :width] = torch.where(m, read.entropy.cpu(), 0.0)
        if top_k:
            out.top_ids[idx, :width] = torch.where(m.unsqueeze(-1), read.top_ids.cpu(), 0)
            out.top_logp[idx, :width] = torch.where(m.unsqueeze(-1), read.top_logp.cpu(), 0.0)
    return out


def policy_update(
    forward: PolicyForward,
    optimizer,
    scheduler,
    exp: Experience,
    mini_batches: list[list[int]],
    settings: UpdateSettings,
    kl_coef: float = 0.0,
) -> dict[str, float]:
    """One optimizer step per mini-batch (lists of sequence indices) of ``forward``'s model;
    returns averaged metrics. ``kl_coef``: the KL controller's coefficient (with
    ``settings.kl_in_loss`` and reference log-probs, the loss's KL term).

    Under data parallelism each rank passes its own sequences; the loss denominators are summed over
    ranks first, so the step equals the single-process step on the union of the ranks' batches.
    """
    model = forward.model
    kl_coef = kl_coef if settings.kl_in_loss else 0.0
    sums: dict[str, float] = {}
    replicated: dict[str, float] = {}
    steps = skipped = 0
    for seqs, real_step in padded(mini_batches):
        micros = split_micro_batches(exp, seqs, forward.packing)
        local = [exp.mask[m] for m in micros] if real_step else []
        stats = global_stats(local)
        optimizer.zero_grad(set_to_none=True)
        for idx, real in padded(micros):
            real = real and real_step
            rows, mask, width = response_rows(
                exp, idx, forward.packing.shares([exp.prompt_of[i] for i in idx])
            )
            teacher = exp.teacher if settings.distill_loss else None
            if teacher is not None:  # the student's log-probs of the teacher's top-k ids too
                rows = dataclasses.replace(rows, at_ids=teacher.top_ids[idx, :width])
            read = forward.readout(rows)
            logp, entropy = read.logp, read.entropy
            mask = mask.to(logp.device)
            old_logp, adv = (
                exp.old_logp[idx, :width].to(logp.device),
                exp.advantages[idx, :width].to(logp.device),
            )
            out = compute_policy_loss(
                settings.policy_loss,
                logp,
                old_logp,
                adv,
                mask,
                # rollout correction: pi_old / pi_rollout per token, applied as the loss defines it
                rollout_is_weights=None if exp.is_weights is None else exp.is_weights[idx, :width],
                **(settings.loss_options or {}),
            )
            token_loss = out.loss
            if settings.offline_shaping > 0 and bool(exp.offline[idx].any()):
                token_loss = _shape_offline(
                    token_loss,
                    logp,
                    adv,
                    mask,
                    exp.offline[idx].to(logp.device),
                    settings.offline_shaping,
                )
            loss = aggregate_loss(
                token_loss, mask, settings.loss_agg_mode, global_stats=stats, norm_length=settings.norm_length
            )
            if not real:  # a filler forward: same collectives, no contribution
                (loss * 0.0).backward()
                continue
            # aggregate_loss scales by dp_size (FSDP averages gradients); metrics are summed over ranks
            _add(sums, "actor/pg_loss", float(loss.detach()) / stats.dp_size)  # the policy term alone
            if kl_coef and exp.ref_logp is not None:
                kl = kl_loss(
                    logp,
                    exp.ref_logp[idx, :width].to(logp.device),
                    mask,
                    settings.kl_kind,
                    settings.loss_agg_mode,
                    global_stats=stats,
                    norm_length=settings.norm_length,
                )
                loss = loss + kl_coef * kl
                _add(sums, "actor/kl_loss", float(kl.detach()) / stats.dp_size)
            if teacher is not None:
                term = distill_loss_term(settings, read.at_logp, teacher.top_logp[idx, :width], mask)
                distill = aggregate_loss(
                    term, mask, settings.loss_agg_mode, global_stats=stats, norm_length=settings.norm_length
                )
                loss = loss + settings.distill_coef * distill
                _add(sums, "actor/distill_loss", float(distill.detach()) / stats.dp_size)
            loss.backward()
            share = float(mask.sum()) / max(stats.num_tokens, 1)
            _add(
                sums,
                "actor/entropy",
                float((entropy.detach() * mask).sum()) / max(float(mask.sum()), 1) * share,
            )
            for k, v in out.metrics.items():
                _add(sums, f"actor/{k}", float(v) * share)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), settings.max_grad_norm)
        if hasattr(grad_norm, "full_tensor"):  # a DTensor under FSDP2: the global norm
            grad_norm = grad_norm.full_tensor()
        if not math.isfinite(float(grad_norm)):
            skipped += 1  # never apply a NaN/inf update; count it instead
        else:
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
        # the gradients' memory goes back before the next mini-batch, the log-prob passes and generation
        optimizer.zero_grad(set_to_none=True)
        replicated["actor/grad_norm"] = replicated.get("actor/grad_norm", 0.0) + float(grad_norm)
        steps += 1
    sums = sum_over_ranks(sums)  # per-rank shares of global quantities add up
    sums.update(replicated)  # the same on every rank
    metrics = {k: v / max(steps, 1) for k, v in sums.items()}
    metrics["actor/skipped_steps"] = float(skipped)
    metrics["actor/lr"] = optimizer.param_groups[0]["lr"]
    return metrics


def distill_loss_term(settings: UpdateSettings, student_topk, teacher_topk, mask) -> torch.Tensor:
    """The ``loss`` distillation objective's per-token term (``algorithms/distill.py``)."""
    from ..algorithms._registry import DISTILL_OBJECTIVES

    objective = DISTILL_OBJECTIVES.get(settings.distill_loss)
    return objective(student_topk, teacher_topk.to(student_topk.device), mask)


def _add(d: dict[str, float], key: str, value: float) -> None:
    d[key] = d.get(key, 0.0) + value


def _shape_offline(token_loss, logp, advantages, mask, offline_rows, gamma: float) -> torch.Tensor:
    """Offline rows: loss ``-A * p / (p + gamma)`` with ``p`` the current token probability.

    Offline responses were not sampled from the policy, so their PPO ratio is 1 at the first update
    and the clip never acts; the plain gradient is proportional to ``p``, so the tokens the policy
    finds unlikely (the ones it has to learn) barely move. ``p / (p + gamma)`` has gradient
    ``gamma / (p + gamma)^2`` w.r.t. ``p``: large for unlikely tokens, small for likely ones
    (LUFFY's policy shaping). Online rows keep the configured policy loss.
    """
    p = logp.exp()
    shaped = -advantages * p / (p + gamma)
    rows = offline_rows.to(torch.bool).unsqueeze(-1) & mask.to(torch.bool)
    return torch.where(rows, shaped, token_loss)
