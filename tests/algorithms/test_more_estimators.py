"""The estimators and modes added after the differential run against veRL and TRL, each against a
hand computation: REINFORCE++-baseline, GRPO pass@k, OPO, GPG, GRPO with the batch std, and the
token-sum aggregation."""

from __future__ import annotations

import math

import pytest
import torch

from easyvideor1.algorithms import get_advantage_estimator
from easyvideor1.algorithms.advantages import compute_advantages
from easyvideor1.algorithms.aggregation import GlobalBatchStats, aggregate_loss
from easyvideor1.algorithms.config import AlgorithmConfig

# two groups of three, one group of one; responses of 3, 2, 3 | 3, 1, 3 | 2 valid tokens
SCORES = [1.0, 0.0, 1.0, 0.0, 0.0, 0.5, 0.7]
GROUPS = [0, 0, 0, 1, 1, 1, 2]
LENGTHS = [3, 2, 3, 3, 1, 3, 2]


def _mask() -> torch.Tensor:
    mask = torch.zeros(len(LENGTHS), 3)
    for i, n in enumerate(LENGTHS):
        mask[i, :n] = 1
    return mask


def _rows(name: str, **options) -> list[float]:
    """Each sequence's advantage (its first token), after checking it is on every valid token only."""
    mask = _mask()
    adv = compute_advantages(name, torch.tensor(SCORES), mask, GROUPS, **options).advantages
    assert torch.all(adv[mask == 0] == 0)
    return [float(adv[i, 0]) for i in range(len(SCORES))]


def _members(g: int) -> list[int]:
    return [i for i, x in enumerate(GROUPS) if x == g]


def test_reinforce_plus_plus_baseline_subtracts_the_group_mean_then_whitens_over_tokens():
    centered = []
    for i, s in enumerate(SCORES):
        group = _members(GROUPS[i])
        mean = sum(SCORES[j] for j in group) / len(group) if len(group) > 1 else 0.0  # alone: no baseline
        centered += [s - mean] * LENGTHS[i]
    mu = sum(centered) / len(centered)
    var = sum((c - mu) ** 2 for c in centered) / len(centered)
    expected = []
    for i, s in enumerate(SCORES):
        group = _members(GROUPS[i])
        mean = sum(SCORES[j] for j in group) / len(group) if len(group) > 1 else 0.0
        expected.append((s - mean - mu) / math.sqrt(var + 1e-8))
    assert _rows("reinforce_plus_plus_baseline") == pytest.approx(expected, abs=1e-6)
    # Bessel-corrected, as veRL's masked_whiten (algorithm.adv_std_unbiased=true)
    bessel = math.sqrt((len(centered) - 1) / len(centered))
    unbiased = _rows("reinforce_plus_plus_baseline", std_unbiased=True)
    assert unbiased == pytest.approx([e * bessel for e in expected], abs=1e-6)


def test_grpo_passk_rewards_only_the_best_response_by_its_margin():
    scores = [0.2, 0.9, 0.5, 1.0, 1.0, 0.0]  # group 0: a clear best; group 1: a tie at the top
    mask = torch.ones(6, 2)
    adv = compute_advantages("grpo_passk", torch.tensor(scores), mask, [0, 0, 0, 1, 1, 1]).advantages[:, 0]
    g0 = scores[:3]
    mean = sum(g0) / 3
    std = math.sqrt(sum((x - mean) ** 2 for x in g0) / 3)
    assert adv.tolist() == pytest.approx([0.0, (0.9 - 0.5) / (std + 1e-6), 0.0, 0.0, 0.0, 0.0], abs=1e-6)
    raw = compute_advantages("grpo_passk", torch.tensor(scores), mask, [0, 0, 0, 1, 1, 1], norm_by_std=False)
    assert raw.advantages[1, 0] == pytest.approx(0.4)
    with pytest.raises(ValueError, match="at least 2 responses per group"):
        compute_advantages("grpo_passk", torch.tensor([1.0]), torch.ones(1, 1), [0])


def test_opo_uses_the_length_weighted_group_baseline():
    expected = []
    for i, s in enumerate(SCORES):
        group = _members(GROUPS[i])
        if len(group) > 1:
            base = sum(LENGTHS[j] * SCORES[j] for j in group) / sum(LENGTHS[j] for j in group)
        else:
            base = 0.0
        expected.append(s - base)
    assert _rows("opo") == pytest.approx(expected, abs=1e-6)


def test_gpg_scales_the_centred_score_by_batch_over_scoring_responses():
    alpha = len(SCORES) / sum(1 for s in SCORES if s != 0)  # 7 / 4
    expected = []
    for i, s in enumerate(SCORES):
        group = _members(GROUPS[i])
        mean = sum(SCORES[j] for j in group) / len(group) if len(group) > 1 else 0.0
        expected.append(alpha * (s - mean))
    assert _rows("gpg") == pytest.approx(expected, abs=1e-6)
    assert _rows("gpg", f_norm=2.0) == pytest.approx([e / 2 for e in expected], abs=1e-6)


def test_grpo_with_the_batch_std_divides_by_the_std_of_every_score():
    mean_all = sum(SCORES) / len(SCORES)
    for unbiased in (False, True):
        n = len(SCORES) - (1 if unbiased else 0)
        std = math.sqrt(sum((s - mean_all) ** 2 for s in SCORES) / n)
        expected = []
        for i, s in enumerate(SCORES):
            group = _members(GROUPS[i])
            mean = sum(SCORES[j] for j in group) / len(group)
            expected.append((s - mean) / (std + 1e-6))
        assert _rows("grpo", std_scope="batch", std_unbiased=unbiased) == pytest.approx(expected, abs=1e-6)
    assert AlgorithmConfig(adv_std_scope="batch").advantage_options()["std_scope"] == "batch"
    with pytest.raises(ValueError, match="algorithm.adv_std_scope"):
        AlgorithmConfig(adv_std_scope="token")


def test_token_sum_adds_every_valid_token_of_the_global_batch():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    stats = GlobalBatchStats(num_tokens=10, num_sequences=5, dp_size=2)  # this rank: 3 of the 10
    # FSDP averages over the 2 ranks, so each rank's share is its sum times 2
    assert float(aggregate_loss(loss, mask, "token-sum", global_stats=stats)) == pytest.approx(
        2 * (1 + 2 + 4)
    )
    assert AlgorithmConfig(loss_agg_mode="token-sum").loss_agg_mode == "token-sum"


@pytest.mark.parametrize("name", ["reinforce_plus_plus_baseline", "grpo_passk", "opo", "gpg"])
def test_each_new_estimator_is_registered_with_its_paper(name):
    doc = get_advantage_estimator(name).__doc__ or ""
    assert "arXiv:" in doc


def test_gspo_has_no_dual_clip_unless_set_and_clamps_its_log_ratio_at_10():
    from easyvideor1.algorithms.policy_losses import gspo, gspo_token, ppo

    # a negative advantage and a sequence ratio of e^2 ~ 7.39: PPO's dual clip (3) would cap the loss
    logp, old = torch.tensor([[0.0, 0.0]]), torch.tensor([[-2.0, -2.0]])
    adv, mask = torch.full((1, 2), -1.0), torch.ones(1, 2)
    for loss_fn in (gspo, gspo_token):
        assert loss_fn(logp, old, adv, mask).loss[0, 0].item() == pytest.approx(math.exp(2.0), rel=1e-6)
        assert loss_fn(logp, old, adv, mask, clip_ratio_dual=3.0).loss[0, 0].item() == pytest.approx(3.0)
    assert ppo(logp, old, adv, mask).loss[0, 0].item() == pytest.approx(3.0)  # the token loss keeps it
    # a sequence log-ratio of 15 counts as 10 (veRL's clamp)
    huge = gspo(torch.zeros(1, 2), torch.full((1, 2), -15.0), adv, mask).loss[0, 0].item()
    assert huge == pytest.approx(math.exp(10.0), rel=1e-6)
    # the config passes the GSPO bound to the GSPO losses only
    assert AlgorithmConfig(policy_loss="gspo").policy_loss_options()["clip_ratio_dual"] is None
    assert (
        AlgorithmConfig(policy_loss="gspo", loss_options={"gspo_clip_ratio_dual": 4.0}).policy_loss_options()[
            "clip_ratio_dual"
        ]
        == 4.0
    )
    assert AlgorithmConfig(policy_loss="ppo").policy_loss_options()["clip_ratio_dual"] == 3.0
    with pytest.raises(ValueError, match="algorithm.loss_options.gspo_clip_ratio_dual"):
        AlgorithmConfig(loss_options={"gspo_clip_ratio_dual": 0.5})


# ------------------------------------------------------------------------------- policy losses
def _loss(name, logp, old, adv, mask=None, **options):
    from easyvideor1.algorithms.policy_losses import compute_policy_loss

    mask = torch.ones_like(logp) if mask is None else mask
    return compute_policy_loss(name, logp, old, adv, mask, **options)


def test_sapo_gates_each_token_smoothly_with_the_temperature_of_its_advantage_sign():
    logp = torch.tensor([[0.3, -0.2, 0.0]], requires_grad=True)
    old = torch.tensor([[0.0, 0.0, 0.0]])
    adv = torch.tensor([[1.0, -2.0, 0.5]])
    out = _loss("sapo", logp, old, adv, sapo_tau_pos=1.0, sapo_tau_neg=1.05)
    expected = []
    for d, a in zip([0.3, -0.2, 0.0], [1.0, -2.0, 0.5], strict=True):
        tau = 1.0 if a > 0 else 1.05
        gate = 1 / (1 + math.exp(-tau * (math.exp(d) - 1))) * 4 / tau
        expected.append(-gate * a)
    assert out.loss[0].tolist() == pytest.approx(expected, rel=1e-6)
    out.loss.sum().backward()
    # on-policy (ratio 1) the gate's slope is 1: the plain policy gradient -A
    assert logp.grad[0, 2].item() == pytest.approx(-0.5, rel=1e-6)
    with pytest.raises(ValueError, match="algorithm.policy_loss=sapo averages per sequence"):
        AlgorithmConfig(policy_loss="sapo")


def test_geo_mean_uses_the_geometric_mean_of_pessimistically_clipped_token_ratios():
    logp = torch.tensor([[0.5, -0.1, 0.0], [0.0, -0.5, 0.0]])
    old = torch.zeros(2, 3)
    adv = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    out = _loss("geo_mean", logp, old, adv, mask, clip_ratio_low=0.2, clip_ratio_high=0.28)
    # row 0 (A > 0): 0.5 is clipped to 0.28 (the pessimistic side), -0.1 kept; 2 tokens
    r0 = math.exp((0.28 - 0.1) / 2)
    # row 1 (A < 0): -0.5 clipped to -0.2; 0 and 0 kept; 3 tokens
    r1 = math.exp((0.0 - 0.2 + 0.0) / 3)
    assert out.loss[0, :2].tolist() == pytest.approx([-r0, -r0], rel=1e-6) and out.loss[0, 2] == 0
    assert out.loss[1].tolist() == pytest.approx([r1] * 3, rel=1e-6)
    assert AlgorithmConfig(policy_loss="gmpo", loss_agg_mode="seq-mean-token-mean").policy_loss == "gmpo"


def test_kl_cov_penalises_the_tokens_with_the_largest_covariance():
    logp = torch.tensor([[-0.1, -2.0, -0.5, -1.0]])
    old = torch.tensor([[-0.3, -2.0, -0.4, -1.2]])
    adv = torch.tensor([[2.0, -1.0, 0.5, 1.0]])
    out = _loss("kl_cov", logp, old, adv, kl_cov_ratio=0.5, kl_cov_coef=0.1)  # 2 of 4 tokens
    a_mean, lp_mean = 0.625, -0.9
    cov = [(a - a_mean) * (lp - lp_mean) for a, lp in zip(adv[0].tolist(), logp[0].tolist(), strict=True)]
    top = sorted(range(4), key=lambda i: -cov[i])[:2]
    delta = (logp - old)[0].tolist()
    expected = [
        -a * math.exp(d) + (0.1 * abs(d) if i in top else 0.0)
        for i, (a, d) in enumerate(zip(adv[0].tolist(), delta, strict=True))
    ]
    assert out.loss[0].tolist() == pytest.approx(expected, rel=1e-6)


def test_clip_cov_drops_the_gradient_of_unclipped_tokens_in_the_covariance_band():
    logp = torch.tensor([[-0.1, -2.5, -0.5, -2.0]], requires_grad=True)
    old = torch.tensor([[-0.1, -2.5, -0.5, -2.0]])  # on-policy: PPO clips nothing
    adv = torch.tensor([[3.0, -3.0, 0.0, 1.0]])
    a_mean, lp_mean = 0.25, -1.275
    cov = [(a - a_mean) * (lp - lp_mean) for a, lp in zip(adv[0].tolist(), logp[0].tolist(), strict=True)]
    band = [i for i, c in enumerate(cov) if 1.0 < c < 5.0]  # tokens 0 and 1
    assert band == [0, 1]
    out = _loss("clip_cov", logp, old, adv, clip_cov_ratio=0.5, clip_cov_lb=1.0, clip_cov_ub=5.0)  # 2 tokens
    out.loss.sum().backward()
    assert logp.grad[0].tolist() == pytest.approx([0.0, 0.0, 0.0, -1.0], abs=1e-6)  # band: no gradient
    assert out.metrics["pg_clipfrac_cov"].item() == pytest.approx(0.5)
    # with one token allowed, exactly one of the two in the band loses its gradient
    logp.grad = None
    _loss("clip_cov", logp, old, adv, clip_cov_ratio=0.25).loss.sum().backward()
    assert sorted(logp.grad[0, :2].abs().tolist()) == pytest.approx([0.0, 3.0])


@pytest.mark.parametrize("name", ["sapo", "geo_mean", "clip_cov", "kl_cov", "dppo"])
def test_each_new_loss_is_registered_with_its_paper(name):
    from easyvideor1.algorithms.policy_losses import get_policy_loss

    assert "arXiv:" in (get_policy_loss(name).__doc__ or "")


def test_dppo_masks_tokens_that_leave_the_divergence_region_in_the_harmful_direction():
    # probabilities old -> new: 0.30 -> 0.60 (rises 0.30), 0.40 -> 0.20 (falls 0.20), 0.50 -> 0.55
    q = torch.tensor([[0.30, 0.40, 0.50, 0.30, 0.40]])
    p = torch.tensor([[0.60, 0.20, 0.55, 0.60, 0.20]])
    adv = torch.tensor([[1.0, 1.0, 1.0, -1.0, -1.0]])
    logp = p.log().requires_grad_()
    out = _loss("dppo", logp, q.log(), adv, dppo_delta_low=0.15, dppo_delta_high=0.15, dppo_ratio_cap=20.0)
    # token 0: A > 0 and p rose by 0.30 > 0.15: out. token 1: A > 0, p fell: in (only a rise counts).
    # token 2: rose 0.05: in. token 3: A < 0, p rose: in. token 4: A < 0, fell 0.20 > 0.15: out.
    inside = [False, True, True, True, False]
    ratio = (p / q)[0].tolist()
    expected = [
        (-a * r * math.log(x) if keep else 0.0)
        for a, r, x, keep in zip(adv[0].tolist(), ratio, p[0].tolist(), inside, strict=True)
    ]
    assert out.loss[0].tolist() == pytest.approx(expected, rel=1e-5)
    out.loss.sum().backward()  # the ratio is a detached weight: d/dlogp = -A * r on the kept tokens
    assert logp.grad[0].tolist() == pytest.approx(
        [(-a * r if k else 0.0) for a, r, k in zip(adv[0].tolist(), ratio, inside, strict=True)], rel=1e-5
    )
    # binary KL: token 2's Bernoulli KL (0.5 vs 0.55) is tiny; token 0's (0.3 vs 0.6) is not
    kl = _loss(
        "dppo", p.log(), q.log(), adv, dppo_divergence="binary_kl", dppo_delta_low=0.05, dppo_delta_high=0.05
    )

    def bern_kl(a, b):
        return a * math.log(a / b) + (1 - a) * math.log((1 - a) / (1 - b))

    assert bern_kl(0.3, 0.6) > 0.05 > bern_kl(0.5, 0.55)
    assert kl.loss[0, 0].item() == 0.0 and kl.loss[0, 2].item() != 0.0
    with pytest.raises(ValueError, match="algorithm.loss_options.dppo_divergence"):
        AlgorithmConfig(loss_options={"dppo_divergence": "topk_tv"})
