"""``models/logprobs.py``: the one log-prob pass over a model (:class:`PolicyForward`)."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from easyvideor1.data.config import DataConfig
from easyvideor1.data.dataset import RecordDataset, encode_prompts
from easyvideor1.data.records import load_records
from easyvideor1.data.synthetic import write_synthetic_set
from easyvideor1.models.inputs import expand
from easyvideor1.models.logprobs import Packing, PolicyForward, ResponseRows, response_logprobs
from easyvideor1.models.tiny import make_tiny_model
from easyvideor1.models.vision import DummyVisionPass
from easyvideor1.rollout.base import banned_token_ids


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny Qwen3-VL, three video prompts and a response of a few tokens to each."""
    d = tmp_path_factory.mktemp("lp")
    model_dir = make_tiny_model(str(d / "model"), "qwen3vl")
    data = write_synthetic_set(str(d / "syn"), 3, size=(64, 48), duration=1.0)
    cfg = DataConfig(
        model_family="qwen3vl", video_nframes=4, video_fps=None, video_min_pixels=1024, video_max_pixels=2048
    )
    ds = RecordDataset(load_records(data), cfg, data)
    model = AutoModelForImageTextToText.from_pretrained(model_dir).train()
    processor = AutoProcessor.from_pretrained(model_dir)
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


def test_a_packed_pass_gives_the_padded_pass_values(setup):
    model, banned, rows = setup
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


def test_the_reference_is_a_second_instance_of_the_same_pass(setup):
    model, banned, rows = setup
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


def test_response_logprobs_is_one_padded_pass(setup):
    model, banned, rows = setup
    with torch.no_grad():
        one_off, _ = response_logprobs(model, rows.inputs, rows.ids, rows.real, banned, 0.7)
        passed, _ = PolicyForward(model, banned=banned, temperature=0.7).logprobs(rows)
    assert torch.equal(one_off, passed)


def test_a_packed_pass_needs_the_media_counts(setup):
    model, banned, rows = setup
    bare = ResponseRows(rows.inputs, rows.ids, rows.real)
    with pytest.raises(ValueError, match="media counts"):
        PolicyForward(model, banned=banned, packing=Packing(padding_free=True)).logprobs(bare)
