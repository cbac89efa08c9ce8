"""The distillation objectives against their formulas, computed by hand on small cases, and the
`algorithm.distill` section's refusals."""

from __future__ import annotations

import math

import pytest
import torch

from easyvideor1.algorithms import register_distill_objective
from easyvideor1.algorithms._registry import DISTILL_OBJECTIVES
from easyvideor1.algorithms.distill import DistillInputs, DistillOutput, TeacherSignal, distill_advantages
from easyvideor1.config import load_config
from easyvideor1.errors import ConfigError

# two responses of 3 tokens, the second with 2 real tokens; A = +1 and -0.5
MASK = torch.tensor([[1, 1, 1], [1, 1, 0]])
ADV = torch.tensor([[1.0, 1.0, 1.0], [-0.5, -0.5, -0.5]])
STUDENT = torch.tensor([[-1.0, -2.0, -0.5], [-0.2, -3.0, 0.0]])
TEACHER = torch.tensor([[-0.5, -2.5, -0.5], [-1.2, -1.0, 0.0]])


def inputs(step: int = 0) -> DistillInputs:
    return DistillInputs(ADV.clone(), STUDENT.clone(), TeacherSignal(TEACHER.clone()), MASK.clone(), step)


def test_opd_adds_the_teachers_log_ratio_to_the_weighted_advantage():
    out = distill_advantages("opd", inputs(), reward_weight=0.5, coef=2.0, options={})
    # 0.5 * A + 2 * (lp_T - lp_S), token by token; padding stays 0
    expected = torch.tensor(
        [[0.5 + 2 * 0.5, 0.5 + 2 * -0.5, 0.5 + 0.0], [-0.25 + 2 * -1.0, -0.25 + 2 * 2.0, 0.0]]
    )
    torch.testing.assert_close(out.advantages, expected)
    # reverse KL on the sampled tokens: mean of lp_S - lp_T over the 5 real tokens
    assert out.metrics["distill/kl_k1"] == pytest.approx((-0.5 + 0.5 + 0.0 + 1.0 - 2.0) / 5)
    k3 = [math.expm1(d) - d for d in (0.5, -0.5, 0.0, -1.0, 2.0)]
    assert out.metrics["distill/kl_k3"] == pytest.approx(sum(k3) / 5)


def test_pure_opd_is_the_negative_reverse_kl():
    out = distill_advantages("opd", inputs(), reward_weight=0.0, coef=1.0, options={})
    torch.testing.assert_close(out.advantages, (TEACHER - STUDENT) * MASK)


def test_rlsd_scales_each_tokens_advantage_by_the_clipped_evidence_and_keeps_its_sign():
    out = distill_advantages("rlsd", inputs(), reward_weight=1.0, coef=1.0, options={"clip": 0.2})
    # w = exp(sign(A) * (lp_T - lp_S)), clipped to [0.8, 1.2]; A_t = A * w
    w = [
        [min(max(math.exp(0.5), 0.8), 1.2), min(max(math.exp(-0.5), 0.8), 1.2), 1.0],
        [min(max(math.exp(1.0), 0.8), 1.2), min(max(math.exp(-2.0), 0.8), 1.2), 0.0],
    ]
    expected = torch.tensor([[1.2, 0.8, 1.0], [-0.5 * 1.2, -0.5 * 0.8, 0.0]])
    assert w[0][:2] == [1.2, 0.8] and w[1][:2] == [1.2, 0.8]
    torch.testing.assert_close(out.advantages, expected)
    assert torch.equal(torch.sign(out.advantages), torch.sign(ADV * MASK))  # no sign flips
    assert out.metrics["distill/reweighted_share"] == pytest.approx(4 / 5)  # every token but the w = 1 one
    assert out.metrics["distill/clipped_share"] == pytest.approx(4 / 5)


def test_rlsd_mixes_the_reweighting_by_lambda_decays_it_and_can_spare_positive_responses():
    half = distill_advantages("rlsd", inputs(), reward_weight=1.0, coef=0.5, options={"clip": 0.2})
    torch.testing.assert_close(
        half.advantages[0, :2], torch.tensor([1.0 * (0.5 + 0.5 * 1.2), 0.5 + 0.5 * 0.8])
    )
    # lambda_decay_steps=4 at step 3: lambda = 0.5 * (1 - 3/4)
    decayed = distill_advantages(
        "rlsd", inputs(step=3), reward_weight=1.0, coef=0.5, options={"lambda_decay_steps": 4}
    )
    assert decayed.metrics["distill/lambda"] == pytest.approx(0.125)
    torch.testing.assert_close(decayed.advantages[0, 0], torch.tensor(0.875 + 0.125 * 1.2))
    gone = distill_advantages(
        "rlsd", inputs(step=9), reward_weight=1.0, coef=0.5, options={"lambda_decay_steps": 4}
    )
    torch.testing.assert_close(gone.advantages, ADV * MASK)  # plain RLVR once lambda reaches 0
    negative = distill_advantages(
        "rlsd", inputs(), reward_weight=1.0, coef=1.0, options={"negative_only": True}
    )
    torch.testing.assert_close(negative.advantages[0], ADV[0])  # A > 0: untouched
    torch.testing.assert_close(negative.advantages[1, :2], torch.tensor([-0.6, -0.4]))


def test_a_registered_objective_is_one_function_with_its_options(tmp_path):
    @register_distill_objective("halve_test", override=True)
    def halve(
        inputs: DistillInputs, *, reward_weight: float, coef: float, factor: float = 0.5
    ) -> DistillOutput:
        return DistillOutput(inputs.advantages * factor * reward_weight)

    cfg = load_config(
        overrides=[
            "algorithm.distill.objective=halve_test",
            "algorithm.distill.teacher=self",
            "algorithm.distill.options.factor=0.25",
        ]
    )
    out = distill_advantages("halve_test", inputs(), 1.0, 1.0, cfg.algorithm.distill.objective_arguments())
    torch.testing.assert_close(out.advantages, ADV * 0.25)


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (["algorithm.distill.objective=opdd"], "algorithm.distill.objective: unknown distillation objective"),
        (["algorithm.distill.objective=opd"], "needs algorithm.distill.teacher"),
        (["algorithm.distill.teacher=self"], "algorithm.distill.objective is none"),
        (
            [
                "algorithm.distill.objective=rlsd",
                "algorithm.distill.teacher=self",
                "algorithm.distill.context=none",
            ],
            "without|privileged context",
        ),
        (
            [
                "algorithm.distill.objective=rlsd",
                "algorithm.distill.teacher=self",
                "algorithm.distill.coef=2",
            ],
            "coef",
        ),
        (["algorithm.distill.options.top_q=3"], "algorithm.distill.options.top_q"),
        (
            [
                "algorithm.distill.objective=rlsd",
                "algorithm.distill.teacher=self",
                "algorithm.distill.sync_steps=5",
            ],
            "needs algorithm.distill.teacher=self and algorithm.distill.self_teacher=reference",
        ),
        (
            [
                "algorithm.distill.objective=rlsd",
                "algorithm.distill.teacher=self",
                "algorithm.distill.self_teacher=reference",
                "algorithm.distill.sync_steps=5",
                "algorithm.kl.type=k3",
            ],
            "moves the reference, which algorithm.kl",
        ),
        (
            [
                "algorithm.distill.objective=opd",
                "algorithm.distill.teacher=self",
                "algorithm.distill.context=x.txt",
            ],
            "context",
        ),
    ],
)
def test_the_section_refuses_what_cannot_run_naming_the_key(overrides, fragment):
    with pytest.raises(ConfigError) as e:
        load_config(overrides=overrides)
    assert any(f in str(e.value) for f in fragment.split("|")), str(e.value)
    assert "\n" not in str(e.value)


def test_gkd_is_the_forward_kl_over_the_teachers_top_k_and_a_tail_bin():
    """Vocabulary of 4; the teacher's top-2 at one position. By hand: the KL over the bins
    {top1, top2, rest}; with k = V - 1 the tail bin is one id, so it is the full forward KL."""
    teacher = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    student = torch.log(torch.tensor([0.25, 0.25, 0.25, 0.25]))
    gkd = DISTILL_OBJECTIVES.get("gkd")
    top2 = gkd(student[None, None, :2], teacher[None, None, :2], torch.ones(1, 1))
    by_hand = 0.5 * math.log(0.5 / 0.25) + 0.3 * math.log(0.3 / 0.25) + 0.2 * math.log(0.2 / 0.5)
    assert float(top2) == pytest.approx(by_hand, rel=1e-6)
    top3 = gkd(student[None, None, :3], teacher[None, None, :3], torch.ones(1, 1))
    full = float((teacher.exp() * (teacher - student)).sum())
    assert float(top3) == pytest.approx(full, rel=1e-6)
    assert 0 < float(top2) < full  # a coarser partition: a lower bound of the full KL
    # the gradient reaches the student's log-probs only, and the mask zeroes padding
    s = student[None, None, :2].repeat(1, 2, 1).requires_grad_(True)
    out = gkd(s, teacher[None, None, :2].repeat(1, 2, 1), torch.tensor([[1, 0]]))
    assert float(out[0, 1].detach()) == 0.0
    out.sum().backward()
    assert s.grad[0, 0].abs().sum() > 0 and float(s.grad[0, 1].abs().sum()) == 0.0


def test_a_loss_objective_scales_the_verifiable_advantage_and_reads_its_top_k():
    out = distill_advantages("gkd", inputs(), reward_weight=0.5, coef=1.0, options={"top_k": 4})
    torch.testing.assert_close(out.advantages, 0.5 * ADV * MASK)
    cfg = load_config(overrides=["algorithm.distill.objective=gkd", "algorithm.distill.teacher=self"])
    assert cfg.algorithm.distill.kind == "loss" and cfg.algorithm.distill.top_k == 32
