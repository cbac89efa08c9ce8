"""``models/logprobs.py``: the one log-prob pass over a model (:class:`PolicyForward`)."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from easyvideor1.data.dataset import encode_prompts
from easyvideor1.models.inputs import expand
from easyvideor1.models.logprobs import Packing, PolicyForward, ResponseRows, response_logprobs
from easyvideor1.models.vision import DummyVisionPass
from easyvideor1.rollout.base import banned_token_ids
from tests.rollout.test_hf_rollout import setup  # noqa: F401 (the rollout tests' fixture, shared)


@pytest.fixture(scope="module")
def passes(setup):  # noqa: F811 (the imported fixture)
    """The rollout tests' tiny Qwen3-VL and video prompts, with a response of a few tokens to each."""
    model, processor, ds = setup
    batch = encode_prompts(processor, [ds[0], ds[1], ds[2]], ds.cfg, ds.loader)
    banned = banned_token_ids(processor.tokenizer)
    texts = ["<answer>A</answer>", "the answer is B, I think", "C"]
    tokens = [processor.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    ids = torch.zeros(3, max(map(len, tokens)), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(tokens):
        ids[i, : len(row)], mask[i, : len(row)] = torch.tensor(row), 1
    rows = ResponseRows(
        expand(batch, [1, 1, 1]), ids, mask, media_counts=(batch.video_counts, batch.image_counts)
    )
    return model, banned, rows


def test_a_packed_pass_gives_the_padded_pass_values(passes):
    model, banned, rows = passes
    forward = PolicyForward(model, DummyVisionPass(model), banned=banned, temperature=0.7)
    packed = PolicyForward(
        model, DummyVisionPass(model), banned=banned, temperature=0.7, packing=Packing(padding_free=True)
    )
    with torch.no_grad():
        (lp, ent), (plp, pent) = forward.logprobs(rows), packed.logprobs(rows)
    m = rows.real.bool()
    assert torch.isfinite(lp[m]).all() and (lp[m] < 0).all()
    assert torch.allclose(plp[m], lp[m], atol=1e-5, rtol=0) and torch.allclose(
        pent[m], ent[m], atol=1e-5, rtol=0
    )
    # the temperature is the pass's: another one gives other log-probs
    with torch.no_grad():
        hot, _ = PolicyForward(model, banned=banned, temperature=1.0).logprobs(rows)
    assert not torch.allclose(hot[m], lp[m])


def test_the_reference_is_a_second_instance_of_the_same_pass(passes):
    model, banned, rows = passes
    forward = PolicyForward(
        model, DummyVisionPass(model), banned=banned, temperature=0.7, packing=Packing(True)
    )
    frozen = copy.deepcopy(model).eval()
    reference = forward.of(frozen, None)
    assert reference.model is frozen and reference.dummy is None
    assert (reference.banned, reference.temperature, reference.packing) == (
        forward.banned,
        forward.temperature,
        forward.packing,
    )
    with torch.no_grad():
        ours, _ = forward.logprobs(rows)
        theirs, _ = reference.logprobs(rows)
    m = rows.real.bool()
    assert torch.allclose(ours[m], theirs[m], atol=1e-6, rtol=0)


def test_response_logprobs_is_one_padded_pass(passes):
    model, banned, rows = passes
    with torch.no_grad():
        one_off, _ = response_logprobs(model, rows.inputs, rows.ids, rows.real, banned, 0.7)
        passed, _ = PolicyForward(model, banned=banned, temperature=0.7).logprobs(rows)
    assert torch.equal(one_off, passed)


def test_a_packed_pass_needs_the_media_counts(passes):
    model, banned, rows = passes
    bare = ResponseRows(rows.inputs, rows.ids, rows.real)
    with pytest.raises(ValueError, match="media counts"):
        PolicyForward(model, banned=banned, packing=Packing(padding_free=True)).logprobs(bare)


def test_top_k_and_at_ids_readouts_are_the_same_packed_and_padded(passes):
    """A teacher's top-k and a student's log-probs of those ids come from the same forward as the
    sampled tokens' and do not depend on the layout; the student's carry a gradient."""
    model, banned, rows = passes
    padded = PolicyForward(model, DummyVisionPass(model), banned=banned, temperature=0.7)
    packed = PolicyForward(
        model, DummyVisionPass(model), banned=banned, temperature=0.7, packing=Packing(True)
    )
    m = rows.real.bool().unsqueeze(-1)
    with torch.no_grad():
        teacher = padded.readout(dataclasses.replace(rows, top_k=4))
        teacher_packed = packed.readout(dataclasses.replace(rows, top_k=4))
    assert torch.equal(teacher.top_ids * m, teacher_packed.top_ids * m)
    torch.testing.assert_close(teacher.top_logp * m, teacher_packed.top_logp * m, atol=1e-5, rtol=0)
    student = packed.readout(dataclasses.replace(rows, at_ids=teacher.top_ids))
    torch.testing.assert_close((student.at_logp * m).detach(), teacher.top_logp * m, atol=1e-5, rtol=0)
    assert student.at_logp.requires_grad
    (student.at_logp * m).sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    model.zero_grad(set_to_none=True)
