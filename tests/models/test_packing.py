"""Padding-free packing: packed log-probs equal the padded forward's (fp32, within 1e-5) for every
family where packing is supported; the hybrid family is refused with the key named."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from easyvideor1.data.config import DataConfig
from easyvideor1.data.dataset import RecordDataset
from easyvideor1.models.inputs import gather_prompts
from easyvideor1.models.loading import load_policy
from easyvideor1.models.packing import check_packable, pack
from easyvideor1.models.tiny import make_tiny_model
from easyvideor1.models.vision import DummyVisionPass
from easyvideor1.rollout.base import banned_token_ids
from easyvideor1.trainer.update import experience_logprobs
from tests.conftest import write_modality_records

from ..trainer.dist_worker import build_experience

KINDS = ["video", "image", "text", "mixed"]


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> str:
    """A video (8 frames), an image, text only, and video + image: prompts of different lengths."""
    return write_modality_records(tmp_path_factory.mktemp("pack"), 8, 0)


_SETUPS: dict[str, tuple] = {}


def _setup(tmp_path, family: str, records: str):
    """A tiny model of ``family`` and a 4-prompt experience (built once per family)."""
    if family not in _SETUPS:
        model_dir = make_tiny_model(str(tmp_path / family), family, layers=1)
        model, processor = load_policy(model_dir)
        model.eval()
        cfg = DataConfig(video_fps=None, video_nframes=4).with_model(model_dir)
        exp = build_experience(processor, RecordDataset.from_files([records], cfg), KINDS)
        _SETUPS[family] = (model, processor, exp)
    return _SETUPS[family]


SLOW = pytest.mark.slow  # the same code path as the fast families, another architecture


@pytest.mark.parametrize(
    "family",
    [
        "qwen3_vl",
        "qwen2_5_vl",
        "glm4v",  # 3-D RoPE from its own get_rope_index (per-frame grids, timestamps between frames)
        "internvl",  # 1-D RoPE: positions restart per sequence, no get_rope_index
        pytest.param("qwen2_vl", marks=SLOW),
        pytest.param("qwen3_vl_moe", marks=SLOW),
    ],
)
def test_packed_logprobs_equal_padded(tmp_path, records, family):
    model, processor, exp = _setup(tmp_path, family, records)
    banned, dummy = banned_token_ids(processor.tokenizer), DummyVisionPass(model)
    padded, ent_padded = experience_logprobs(model, exp, banned, dummy, 1.0, 3)
    packed, ent_packed = experience_logprobs(model, exp, banned, dummy, 1.0, 3, padding_free=True)
    m = exp.mask.bool()
    assert torch.isfinite(padded[m]).all() and padded[m].abs().min() > 0
    assert torch.allclose(packed[m], padded[m], atol=1e-5, rtol=0)
    assert torch.allclose(ent_packed[m], ent_padded[m], atol=1e-5, rtol=0)
    assert (packed[~m] == 0).all()


def _pack_all(model, exp):
    """Every sequence of ``exp`` as padded inputs and packed into one row."""
    seq = gather_prompts(exp.batch, exp.prompt_of)
    counts = (
        [exp.batch.video_counts[p] for p in exp.prompt_of],
        [exp.batch.image_counts[p] for p in exp.prompt_of],
    )
    return seq, pack(model, seq, exp.ids, exp.mask, *counts)


def test_packing_removes_padding_and_restarts_positions(tmp_path, records):
    model, _, exp = _setup(tmp_path, "qwen3_vl", records)
    seq, p = _pack_all(model, exp)
    assert (
        p.inputs["input_ids"].shape[1] == sum(p.lengths) == int(seq["attention_mask"].sum() + exp.mask.sum())
    )
    assert p.inputs["input_ids"].shape[1] < seq["input_ids"].numel() + exp.ids.numel()
    text = p.inputs["position_ids"][0, 0]
    assert (text == 0).sum() == len(exp)  # every sequence restarts at 0: its attention boundary
    assert len(p.keep) == int(exp.mask.sum())
    # a control: without the boundaries (one causal row), sequences see each other and differ
    with torch.no_grad():
        inputs = dict(p.inputs, position_ids=p.inputs["position_ids"][1:])
        leaky = model(**inputs, use_cache=False, logits_to_keep=p.keep).logits
        exact = model(**p.inputs, use_cache=False, logits_to_keep=p.keep).logits
    assert (leaky - exact).abs().max() > 1e-3


def test_hybrid_family_is_refused_naming_the_key():
    fake = SimpleNamespace(config=SimpleNamespace(model_type="qwen3_5"))
    with pytest.raises(ValueError, match="trainer.padding_free.*qwen3_5"):
        check_packable(fake)


def test_one_dimensional_positions_restart_per_sequence(tmp_path, records):
    model, _, exp = _setup(tmp_path, "internvl", records)
    seq, p = _pack_all(model, exp)
    pos = p.inputs["position_ids"]
    assert pos.shape == p.inputs["input_ids"].shape  # [1, L]: no M-RoPE rows
    starts = [0, *torch.tensor(p.lengths).cumsum(0)[:-1].tolist()]
    assert (pos[0] == 0).nonzero().flatten().tolist() == starts
    assert torch.equal(p.inputs["pixel_values"], seq["pixel_values"])
