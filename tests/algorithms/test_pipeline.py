"""End to end on a toy policy: the pieces compose into a GRPO/DAPO update that learns.

A "policy" is a table of logits over a 4-token vocabulary; a response is 4 sampled tokens, shortened
when token 3 ("EOS") is sampled; the verifiable reward is 1 when token 2 appears in the response.
Pure tensors, no model, < 1 s.
"""

from __future__ import annotations

import pytest
import torch

from easyvideor1.algorithms import (
    AlgorithmConfig,
    DynamicSampler,
    GlobalBatchStats,
    aggregate_loss,
    compute_advantages,
    compute_policy_loss,
    entropy_from_logits,
    kl_loss,
    logprobs_from_logits,
    masked_mean,
)

PROMPTS, N, T, V, EOS = 4, 8, 4, 4, 3


def success_probability(logits: torch.Tensor) -> float:
    """Exact P(token 2 is sampled before any EOS), computed independently of the sampled batches."""
    q = torch.softmax(logits, -1)
    alive, p = 1.0, 0.0
    for t in range(T):
        p += alive * q[t, 2].item()
        alive *= 1.0 - q[t, 2].item() - q[t, EOS].item()
    return p


def rollout(
    logits: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    probs = torch.softmax(logits, -1).expand(PROMPTS * N, T, V).reshape(-1, V)
    ids = torch.multinomial(probs, 1, generator=generator).reshape(PROMPTS * N, T)
    eos_seen = torch.cumsum((ids == EOS).int(), -1)
    mask = (eos_seen == 0) | ((eos_seen == 1) & (ids == EOS))  # up to and including the first EOS
    scores = ((ids == 2) & mask).any(-1).float()
    return ids, mask, scores


@pytest.mark.parametrize(
    ("estimator", "loss", "agg"),
    [
        ("grpo", "ppo", "token-mean"),
        ("dr_grpo", "ppo", "seq-mean-token-sum-norm"),
        ("rloo", "gspo", "seq-mean-token-mean"),
        ("gdpo", "cispo", "seq-mean-token-sum"),
    ],
)
def test_toy_policy_improves(estimator: str, loss: str, agg: str) -> None:
    cfg = AlgorithmConfig(adv_estimator=estimator, policy_loss=loss, loss_agg_mode=agg, loss_norm_length=T)
    gen = torch.Generator().manual_seed(0)
    theta = torch.zeros(T, V, requires_grad=True)
    ref = theta.detach().clone()
    optimizer = torch.optim.SGD([theta], lr=1.0)
    uids = torch.arange(PROMPTS).repeat_interleave(N)
    start = success_probability(theta.detach())  # 0.46875 for uniform logits
    for _ in range(25):
        with torch.no_grad():
            ids, mask, scores = rollout(theta, gen)
            old_logp = logprobs_from_logits(theta.expand(len(ids), T, V), ids, mask=mask)
        sampler: DynamicSampler[None] = DynamicSampler(target_groups=PROMPTS, max_tries=1)
        sampler.add_round(scores, uids)
        keep = torch.zeros(len(ids), dtype=torch.bool)
        for part in sampler.selection():
            keep[part.rows] = True
        if not keep.any():
            continue
        ids, mask, scores, group = ids[keep], mask[keep], scores[keep], uids[keep]
        rewards = {"accuracy": scores, "format": mask.sum(-1).float()} if estimator == "gdpo" else scores
        adv = compute_advantages(estimator, rewards, mask, group, **cfg.advantage_options()).advantages
        stats = GlobalBatchStats.from_mask(mask)
        optimizer.zero_grad()
        for rows in (slice(0, len(ids) // 2), slice(len(ids) // 2, None)):  # two micro-batches
            logits = theta.expand(len(ids[rows]), T, V)
            logp = logprobs_from_logits(logits, ids[rows], mask=mask[rows])
            out = compute_policy_loss(
                cfg.policy_loss,
                logp,
                old_logp[keep][rows],
                adv[rows],
                mask[rows],
                **cfg.policy_loss_options(),
            )
            ref_logp = logprobs_from_logits(ref.expand_as(logits), ids[rows], mask=mask[rows])
            total = aggregate_loss(
                out.loss, mask[rows], agg, global_stats=stats, norm_length=T
            ) + 1e-3 * kl_loss(logp, ref_logp, mask[rows], "k3", agg, global_stats=stats, norm_length=T)
            total.backward()
        assert torch.isfinite(theta.grad).all()
        optimizer.step()
    with torch.no_grad():
        final = success_probability(theta)
        entropy = masked_mean(entropy_from_logits(theta.expand(1, T, V)), torch.ones(1, T))
    assert final > start + 0.2, (start, final)
    assert 0.0 < entropy.item() < torch.log(torch.tensor(float(V))).item()
