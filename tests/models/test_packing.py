"""Padding-free packing: packed log-probs equal the padded forward's (fp32, within 1e-5) for every
family where packing is supported; the hybrid family is refused with the key named."""

from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from easyvideor1.models.inputs import gather_prompts
from easyvideor1.models.logprobs import Packing, PolicyForward
from easyvideor1.models.packing import cu_seqlens, needs_blocks, pack
from easyvideor1.models.vision import DummyVisionPass
from easyvideor1.rollout.base import banned_token_ids
from easyvideor1.trainer.update import experience_logprobs
from tests.conftest import write_modality_records

from .conftest import family_experience


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
        _SETUPS[family] = family_experience(tmp_path, family, records)
    return _SETUPS[family][:3]


SLOW = pytest.mark.slow  # the same code path as the fast families, another architecture


@pytest.mark.parametrize(
    "family",
    [
        "qwen3_vl",
        "qwen2_5_vl",
        "glm4v",  # 3-D RoPE from its own get_rope_index (per-frame grids, timestamps between frames)
        "internvl",  # 1-D RoPE: positions restart per sequence, no get_rope_index
        "qwen3_5",  # gated DeltaNet: each sequence a block of the shared-prefix layout
        pytest.param("qwen2_vl", marks=SLOW),
        pytest.param("qwen3_vl_moe", marks=SLOW),
    ],
)
def test_packed_logprobs_equal_padded(tmp_path, records, family):
    model, processor, exp = _setup(tmp_path, family, records)
    banned, dummy = banned_token_ids(processor.tokenizer), DummyVisionPass(model)
    padded, ent_padded = experience_logprobs(
        PolicyForward(model, dummy, None, banned, packing=Packing(micro_batch_size=3)), exp
    )
    packed, ent_packed = experience_logprobs(
        PolicyForward(model, dummy, None, banned, packing=Packing(True, micro_batch_size=3)), exp
    )
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


def test_hybrid_families_pack_as_blocks_not_as_one_causal_row():
    fake = SimpleNamespace(config=SimpleNamespace(model_type="qwen3_5"))
    assert needs_blocks(fake)
    with pytest.raises(ValueError, match="qwen3_5 packs as shared-prefix blocks"):
        pack(fake, {}, torch.zeros(1, 1), torch.zeros(1, 1), [0], [0])


def test_one_dimensional_positions_restart_per_sequence(tmp_path, records):
    model, _, exp = _setup(tmp_path, "internvl", records)
    seq, p = _pack_all(model, exp)
    pos = p.inputs["position_ids"]
    assert pos.shape == p.inputs["input_ids"].shape  # [1, L]: no M-RoPE rows
    starts = [0, *torch.tensor(p.lengths).cumsum(0)[:-1].tolist()]
    assert (pos[0] == 0).nonzero().flatten().tolist() == starts
    assert torch.equal(p.inputs["pixel_values"], seq["pixel_values"])


@contextmanager
def attention(model, name: str):
    """``model`` (and its sub-configs: text and vision) on attention ``name`` for a while."""
    before = model.config._attn_implementation
    model.config._attn_implementation = name
    try:
        yield
    finally:
        model.config._attn_implementation = before


def test_packed_logprobs_equal_padded_under_eager(tmp_path, records):
    model, processor, exp = _setup(tmp_path, "qwen3_vl", records)
    banned, dummy = banned_token_ids(processor.tokenizer), DummyVisionPass(model)
    with attention(model, "eager"):
        padded, _ = experience_logprobs(
            PolicyForward(model, dummy, None, banned, packing=Packing(micro_batch_size=3)), exp
        )
        packed, _ = experience_logprobs(
            PolicyForward(model, dummy, None, banned, packing=Packing(True, micro_batch_size=3)), exp
        )
    m = exp.mask.bool()
    assert torch.allclose(packed[m], padded[m], atol=1e-5, rtol=0)


def test_packed_boundaries_are_the_ones_transformers_derives(tmp_path, records):
    """flash-attention reads a packed row's boundaries from its text positions (transformers' own
    helper) or from the explicit varlen inputs: both are the cumulative sequence lengths."""
    from transformers.modeling_flash_attention_utils import prepare_fa_kwargs_from_position_ids

    model, _, exp = _setup(tmp_path, "qwen3_vl", records)
    _, p = _pack_all(model, exp)
    assert "cu_seq_lens_q" not in p.inputs  # sdpa: the positions carry the layout
    (cu_q, cu_k), (max_q, _) = prepare_fa_kwargs_from_position_ids(p.inputs["position_ids"][0])
    expected = cu_seqlens(p.lengths)
    assert expected.tolist()[1:] == torch.tensor(p.lengths).cumsum(0).tolist() and expected[0] == 0
    assert torch.equal(cu_q, expected) and torch.equal(cu_k, expected) and int(max_q) == max(p.lengths)
    with attention(model, "flash_attention_2"):
        _, flash = _pack_all(model, exp)
    assert torch.equal(flash.inputs["cu_seq_lens_q"], expected)
    assert torch.equal(flash.inputs["cu_seq_lens_k"], expected)
    assert flash.inputs["max_length_q"] == flash.inputs["max_length_k"] == max(p.lengths)


class _TorchFlash:
    """flash-attn's two entry points written with torch's SDPA, one sequence at a time, recording
    the boundaries each call gets: transformers' own flash-attention path (mask creation, unpadding,
    varlen dispatch, the vision tower's branch) then runs on the CPU."""

    def __init__(self):
        self.varlen: list[tuple[list[int], bool, object]] = []

    def varlen_fn(
        self, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, dropout_p=0.0,
        softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, deterministic=False,
    ):  # fmt: skip
        assert torch.equal(cu_seqlens_q, cu_seqlens_k)
        self.varlen.append((cu_seqlens_q.tolist(), causal, max_seqlen_q))
        bounds = cu_seqlens_q.tolist()
        out = [
            self._attend(q[a:b][None], k[a:b][None], v[a:b][None], softmax_scale, causal)[0]
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        ]
        return torch.cat(out)

    def dense_fn(
        self, q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
        deterministic=False,
    ):  # fmt: skip
        return self._attend(q, k, v, softmax_scale, causal)

    @staticmethod
    def _attend(q, k, v, scale, causal):  # [B, L, H, D], grouped key/value heads repeated
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], 1) for t in (k, v))
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale).transpose(1, 2)


@pytest.fixture
def torch_flash(monkeypatch):
    import transformers.modeling_flash_attention_utils as fa

    kernel = _TorchFlash()
    monkeypatch.setattr(
        fa,
        "_lazy_imports",
        lambda *a, **k: (kernel.dense_fn, kernel.varlen_fn, None, fa._pad_input, fa._unpad_input),
    )
    for name in ("_loaded_implementation", "_flash_fn", "_flash_varlen_fn", "_process_flash_kwargs_fn"):
        monkeypatch.setattr(fa, name, None)  # loaded again now, and restored afterwards
    return kernel


def test_flash_attention_path_packed_equals_padded(tmp_path, records, torch_flash):
    """transformers' flash-attention path, its kernel stood in for by torch: the packed row reaches
    the text layers as its sequences' boundaries (cumulative lengths, given as host numbers), and
    packed log-probs equal the padded ones, which equal sdpa's."""
    model, processor, exp = _setup(tmp_path, "qwen3_vl", records)
    banned, dummy = banned_token_ids(processor.tokenizer), DummyVisionPass(model)
    sdpa, _ = experience_logprobs(
        PolicyForward(model, dummy, None, banned, packing=Packing(micro_batch_size=3)), exp
    )
    with attention(model, "flash_attention_2"):
        assert model.config.vision_config._attn_implementation == "flash_attention_2"
        padded, _ = experience_logprobs(
            PolicyForward(model, dummy, None, banned, packing=Packing(micro_batch_size=3)), exp
        )
        torch_flash.varlen.clear()
        packed, _ = experience_logprobs(
            PolicyForward(model, dummy, None, banned, packing=Packing(True, micro_batch_size=3)), exp
        )
    m = exp.mask.bool()
    assert torch.allclose(padded[m], sdpa[m], atol=1e-5, rtol=0)
    assert torch.allclose(packed[m], padded[m], atol=1e-5, rtol=0)
    # the text layers' calls (causal; the vision tower's are not)
    text = [(cu, longest) for cu, causal, longest in torch_flash.varlen if causal]
    micro = [[0, 1, 2], [3, 4, 5], [6, 7]]  # micro-batches of 3 sequences
    seq = gather_prompts(exp.batch, exp.prompt_of)
    lengths = (seq["attention_mask"].sum(1) + exp.mask.sum(1)).tolist()
    expected = [cu_seqlens([lengths[i] for i in idx]).tolist() for idx in micro]
    assert [cu for cu, _ in text] == expected  # one text layer per forward
    assert all(isinstance(longest, int) for _, longest in text)  # given, not derived on the device
