"""Distillation objectives: a teacher's log-probs of the student's own sampled tokens turned into a
training signal, mixed with the verifiable reward's advantages.

Each objective is one registered function (``@register_distill_objective``) of
:class:`DistillInputs` and its options, returning :class:`DistillOutput`. The built-ins reshape the
advantages (``kind="advantage"``), so the configured policy loss, its clipping and aggregation
apply to the result unchanged:

- ``opd``, on-policy distillation (Agarwal et al., 2024, arXiv:2306.13649; Lu, "On-Policy
  Distillation", Thinking Machines 2025): every token's reverse-KL estimate on the sampled token,
  ``lp_S - lp_T``, is a per-token penalty added to the advantage:
  ``A_t = reward_weight * A + coef * (lp_T(t) - lp_S(t))`` (slime's and ms-swift's form, tinker's
  with no discount; no whitening). With ``reward_weight: 0`` it is pure distillation.
- ``rlsd``, RLVR with self-distillation (Yang et al., 2026, arXiv:2604.03128): the verifiable
  advantage keeps each token's sign, the privileged teacher's evidence sets its magnitude.
  ``Delta_t = lp_T(t) - lp_S(t)`` (no gradient), ``w_t = exp(sign(A) Delta_t)``,
  ``A_t = reward_weight * A * ((1 - lam) + lam * clip(w_t, 1 - eps, 1 + eps))`` with
  ``lam = coef``. ``coef: 1`` is the paper's formula; the authors' recipe uses 0.5, decayed to 0
  over 60 steps (``options.lambda_decay_steps``). Since ``w_t > 0`` no token's sign flips: the
  teacher moves credit between the tokens of one response, never the response's direction.

One objective adds a loss term instead (``kind="loss"``): a function of the student's and the
teacher's log-probs of the teacher's top-k ids at each position, giving a per-token loss that the
update aggregates like the policy loss and adds with weight ``coef``; the verifiable advantages
are scaled by ``reward_weight``:

- ``gkd``, top-k forward KL (GKD, Agarwal et al., 2024, arXiv:2306.13649, at beta = 0: the
  teacher's distribution is the target): the KL over ``top_k + 1`` bins, the teacher's ``top_k`` ids
  and one bin for the rest of the vocabulary, ``sum_j p_T(j) (log p_T(j) - log p_S(j)) +
  p_T(rest) (log p_T(rest) - log p_S(rest))``, both distributions normalised over the whole
  vocabulary (the tail bin as in TRL's server distillation and the RLSD authors' top-k KL). Unlike
  a sum over the k ids alone (veRL's) it is a true KL, never negative, and a lower bound of the
  full-vocabulary forward KL that grows to it with k.

``lp_S`` is the old policy's log-prob (the log-prob pass before the update; equal to the
rollout's on-policy), as ms-swift and slime use; ``lp_T`` the teacher's over the same tokens (its
view of the prompt may hold privileged context). Both come at the rollout temperature.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ._registry import DISTILL_OBJECTIVES, distill_objective_options
from .masked import masked_mean


@dataclass
class TeacherSignal:
    """The teacher's log-prob of each sampled token, ``[N, T]`` (0 where the mask is 0), and for a
    ``loss`` objective its ``top_k`` most likely ids and their log-probs at each position."""

    logp: torch.Tensor
    top_ids: torch.Tensor | None = None  # [N, T, k]
    top_logp: torch.Tensor | None = None  # [N, T, k]


@dataclass
class DistillInputs:
    """What an objective reads: the verifiable advantages, the student's and the teacher's
    log-probs of the sampled tokens, the loss mask, and where the run is."""

    advantages: torch.Tensor  # [N, T], the estimator's
    student_logp: torch.Tensor  # [N, T], the old policy's
    teacher: TeacherSignal
    mask: torch.Tensor  # [N, T], the policy's own tokens
    step: int = 0


@dataclass
class DistillOutput:
    advantages: torch.Tensor  # [N, T]
    metrics: dict[str, float] = field(default_factory=dict)


def distill_advantages(name: str, inputs: DistillInputs, reward_weight: float, coef: float, options: dict):
    """The advantages objective ``name`` makes of ``inputs`` (a ``loss`` objective's: the verifiable
    ones times ``reward_weight``), plus the ``distill/*`` metrics every objective reports: the
    teacher-student KL estimates on the sampled tokens (k1 and the non-negative k3)."""
    mask = inputs.mask.bool()
    if DISTILL_OBJECTIVES.metadata(name).get("kind") == "loss":  # its term joins the loss in the update
        out = DistillOutput((reward_weight * inputs.advantages).masked_fill(~mask, 0.0))
    else:
        out = DISTILL_OBJECTIVES.get(name)(inputs, reward_weight=reward_weight, coef=coef, **options)
    delta = (inputs.teacher.logp - inputs.student_logp).masked_fill(~mask, 0.0)
    out.metrics["distill/kl_k1"] = float(masked_mean(-delta, mask))
    out.metrics["distill/kl_k3"] = float(masked_mean(torch.expm1(delta) - delta, mask))
    out.metrics["distill/teacher_logp"] = float(masked_mean(inputs.teacher.logp, mask))
    return out


def _gain(inputs: DistillInputs) -> torch.Tensor:
    """``lp_T - lp_S`` on the loss mask (0 elsewhere), no gradient."""
    mask = inputs.mask.bool()
    return (inputs.teacher.logp - inputs.student_logp).detach().masked_fill(~mask, 0.0)


def opd(inputs: DistillInputs, *, reward_weight: float, coef: float) -> DistillOutput:
    """On-policy distillation: ``reward_weight * A + coef * (lp_T - lp_S)`` per token (see the
    module docstring)."""
    mask = inputs.mask.bool()
    term = coef * _gain(inputs)
    adv = (reward_weight * inputs.advantages + term).masked_fill(~mask, 0.0)
    return DistillOutput(adv, {"distill/advantage_term": float(masked_mean(term, mask))})


def rlsd(
    inputs: DistillInputs,
    *,
    reward_weight: float,
    coef: float,
    clip: float = 0.2,
    negative_only: bool = False,
    lambda_decay_steps: int = 0,
) -> DistillOutput:
    """RLVR with self-distillation: ``reward_weight * A * ((1 - lam) + lam * clip(exp(sign(A) *
    (lp_T - lp_S)), 1 - clip, 1 + clip))`` per token, ``lam = coef`` (linearly to 0 over
    ``lambda_decay_steps`` steps when > 0); ``negative_only`` reweights only the tokens of
    responses with a negative advantage (the authors' option against shrinking answers)."""
    mask = inputs.mask.bool()
    lam = coef if lambda_decay_steps <= 0 else coef * max(0.0, 1.0 - inputs.step / lambda_decay_steps)
    evidence = torch.exp(torch.sign(inputs.advantages) * _gain(inputs))
    weight = evidence.clamp(1.0 - clip, 1.0 + clip)
    scale = (1.0 - lam) + lam * weight
    if negative_only:
        scale = torch.where(inputs.advantages < 0, scale, torch.ones_like(scale))
    adv = (reward_weight * inputs.advantages * scale).masked_fill(~mask, 0.0)
    moved = mask & (inputs.advantages != 0) & (scale != 1.0)
    metrics = {
        "distill/reweighted_share": float(masked_mean(moved.float(), mask)),
        "distill/scale_mean": float(masked_mean(scale, mask & (inputs.advantages != 0))),
        "distill/clipped_share": float(masked_mean((weight != evidence).float(), mask)),
        "distill/lambda": lam,
    }
    return DistillOutput(adv, metrics)


def gkd(student_topk_logp: torch.Tensor, teacher_topk_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-token forward KL from the teacher to the student over the teacher's top-k ids and one
    tail bin (the module docstring), ``[N, T]`` from ``[N, T, k]`` log-probs; 0 off the mask.
    Differentiable in the student's log-probs."""
    teacher = teacher_topk_logp.detach().to(student_topk_logp.dtype)
    p_teacher = teacher.exp()
    head = (p_teacher * (teacher - student_topk_logp)).sum(-1)
    tail_teacher = _log_rest(teacher)
    tail_student = _log_rest(student_topk_logp)
    tail = tail_teacher.exp() * (tail_teacher - tail_student)
    return torch.where(mask.bool(), head + tail, torch.zeros_like(head))


TAIL_FLOOR = 1e-10  # the least mass the tail bin gets: a top-k holding all of it has log 0 elsewhere


def _log_rest(topk_logp: torch.Tensor) -> torch.Tensor:
    """``log(1 - sum_j p_j)``: the log-mass outside the k ids, at least ``log(TAIL_FLOOR)``."""
    inside = torch.logsumexp(topk_logp, dim=-1).clamp(max=0.0)
    return torch.log(torch.clamp(-torch.expm1(inside), min=TAIL_FLOOR))


__all__ = [
    "DistillInputs",
    "DistillOutput",
    "TeacherSignal",
    "distill_advantages",
    "distill_objective_options",
    "gkd",
    "opd",
    "rlsd",
]
