"""The shared-prefix layout: each prompt once in the row, its responses after it. Log-probs,
entropies, gradients and one update equal the unshared padded forward's (fp32, CPU) for every
family, with video, image and text prompts mixed, groups split over micro-batches, packed and
under a token budget; the attention kernel equals a dense mask."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from easyvideor1.models.loading import load_policy
from easyvideor1.models.logprobs import Packing, PolicyForward
from easyvideor1.models.lora import attach_lora, reference_forward
from easyvideor1.models.packing import flash_text_attention, pack_shared
from easyvideor1.models.shared_prefix import ATTENTION as SHARED_ATTENTION
from easyvideor1.models.shared_prefix import Block, SharedLayout, shared_attention
from easyvideor1.models.shared_prefix import install as install_shared_prefix
from easyvideor1.models.tiny import make_tiny_model
from easyvideor1.models.vision import DummyVisionPass
from easyvideor1.models.vision_cache import VisionFeatureCache
from easyvideor1.rollout.base import banned_token_ids
from easyvideor1.tools import ToolsConfig
from easyvideor1.tools.session import ToolSession
from easyvideor1.trainer.config import LoraConfig
from easyvideor1.trainer.update import (
    UpdateSettings,
    experience_logprobs,
    policy_update,
    prefix_tokens_saved,
    response_rows,
)
from tests.conftest import write_modality_records

from ..trainer.dist_worker import build_episodes
from .conftest import KINDS, family_experience


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> str:
    return write_modality_records(tmp_path_factory.mktemp("shared"), 8, 0)


_SETUPS: dict[str, tuple] = {}


def _setup(tmp_path, family: str, records: str):
    """A tiny 2-layer model of ``family`` (Qwen3.5: one DeltaNet and one attention layer) and an
    experience of 4 prompts x 2 responses (built once per family)."""
    if family not in _SETUPS:
        _SETUPS[family] = family_experience(tmp_path, family, records, layers=2)
    return _SETUPS[family][:3]


def _forward(model, processor, **packing) -> PolicyForward:
    return PolicyForward(
        model, DummyVisionPass(model), None, banned_token_ids(processor.tokenizer), packing=Packing(**packing)
    )


def _dense_reference(q, k, v, layout: SharedLayout):
    """The layout as an ``S x S`` boolean mask (what the kernel must equal)."""
    length = q.shape[2]
    allowed = torch.zeros(length, length, dtype=torch.bool)
    for b in layout.blocks:
        p0, p1 = b.start, b.start + b.prompt
        allowed[p0:p1, p0:p1] = torch.ones(b.prompt, b.prompt, dtype=torch.bool).tril()
        for s, n in zip(b.response_starts(), b.responses, strict=True):
            allowed[s : s + n, p0:p1] = True
            allowed[s : s + n, s : s + n] = torch.ones(n, n, dtype=torch.bool).tril()
    allowed |= torch.eye(length, dtype=torch.bool)  # padding rows attend to themselves (never read)
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
    real = torch.zeros(length, dtype=torch.bool)
    real[: layout.length] = True
    return out * real[None, None, :, None]


def test_the_kernel_equals_the_dense_mask_values_and_gradients():
    torch.manual_seed(0)
    # a prompt with 3 responses of different lengths, a sequence alone, then padding
    layout = SharedLayout((Block(0, 7, (3, 5, 1)), Block(16, 6)))
    q = torch.randn(1, 4, 25, 8, dtype=torch.float64, requires_grad=True)
    k = torch.randn(1, 2, 25, 8, dtype=torch.float64, requires_grad=True)  # grouped-query heads
    v = torch.randn(1, 2, 25, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(1, 4, 25, 8, dtype=torch.float64)
    got = shared_attention(q, k, v, layout)
    grads = torch.autograd.grad((got * w).sum(), (q, k, v))
    want = _dense_reference(q, k, v, layout)
    grads_want = torch.autograd.grad((want * w).sum(), (q, k, v))
    assert torch.allclose(got, want, atol=1e-12)
    for g, h in zip(grads, grads_want, strict=True):
        assert torch.allclose(g, h, atol=1e-12)


FAMILIES = [
    "qwen2_5_vl",  # M-RoPE with video timestamps (second_per_grid_ts)
    "qwen3_vl",  # DeepStack features, timestamps as text
    "glm4v",  # its own 3-D positions
    "internvl",  # 1-D RoPE: responses continue from the prompt's end
    "qwen3_5",  # gated DeltaNet: the prompt's recurrent and convolution state starts each response
]


@pytest.mark.parametrize("family", FAMILIES)
def test_shared_logprobs_equal_the_unshared_forward(tmp_path, records, family):
    model, processor, exp = _setup(tmp_path, family, records)
    padded, ent_padded = experience_logprobs(_forward(model, processor, micro_batch_size=3), exp)
    m = exp.mask.bool()
    assert torch.isfinite(padded[m]).all() and padded[m].abs().min() > 0
    # 3 sequences per micro-batch: groups of 2 split over micro-batches (a prompt with part of its
    # responses); then the whole batch in one row; then by token budget
    for packing in (
        dict(micro_batch_size=3, shared_prefix="on"),
        dict(micro_batch_size=8, shared_prefix="auto", padding_free=True),
        dict(max_tokens=150, shared_prefix="auto"),
    ):
        shared, ent_shared = experience_logprobs(_forward(model, processor, **packing), exp)
        assert torch.allclose(shared[m], padded[m], atol=1e-5, rtol=0), packing
        assert torch.allclose(ent_shared[m], ent_padded[m], atol=1e-5, rtol=0), packing
        assert (shared[~m] == 0).all()


@pytest.mark.parametrize("family", ["qwen3_vl", "qwen3_5"])
def test_the_layout_is_what_makes_it_exact(tmp_path, records, family):
    """A control: the same shared row run as one plain causal sequence (no layout) differs, so the
    equality above is the layout's work (Qwen3.5: its DeltaNet layers' too)."""
    model, processor, exp = _setup(tmp_path, family, records)
    rows, _, _ = response_rows(exp, list(range(len(exp))), shared=True)
    p = pack_shared(model, rows.inputs, rows.blocks, rows.ids, rows.real, rows.media_counts)
    # the row: each prompt once, then its responses
    prompt = exp.batch.inputs["attention_mask"].sum(1)
    assert p.inputs["input_ids"].shape[1] == int(prompt.sum() + exp.mask.sum())
    assert [b.responses for b in p.layout.blocks] == [
        tuple(int(n) for n in exp.mask[2 * i : 2 * i + 2].sum(1)) for i in range(4)
    ]
    forward = _forward(model, processor, shared_prefix="on")
    with torch.no_grad():
        exact = forward.logprobs(rows)[0]
        leaky = model(**p.inputs, use_cache=False, logits_to_keep=p.keep).logits  # no shared_layout
        kept = model(**p.inputs, use_cache=False, logits_to_keep=p.keep, shared_layout=p.layout).logits
    assert (leaky - kept).abs().max() > 1e-3
    assert torch.isfinite(exact).all()


def _updated(model, processor, exp, mode: str, cache: bool = False):
    """One update (one mini-batch, 3 sequences per micro-batch) of ``model`` itself with shared
    prefixes ``mode``: its gradient, as accumulated before the step, by parameter name."""
    vision = VisionFeatureCache([model]) if cache else None
    if vision is not None:
        vision.start(exp.batch, exp.response_media)
    forward = PolicyForward(
        model, None if cache else DummyVisionPass(model), vision, banned_token_ids(processor.tokenizer),
        packing=Packing(micro_batch_size=3, shared_prefix=mode),
    )  # fmt: skip
    step = copy.copy(exp)
    step.old_logp, _ = experience_logprobs(forward, step)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    grads = {}  # one mini-batch: the gradients it accumulated, as its step reads them

    def keep(*_):
        grads.update({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})

    opt.register_step_pre_hook(keep)
    policy_update(forward, opt, None, step, [list(range(len(step)))], UpdateSettings(max_grad_norm=1e9))
    if vision is not None:
        vision.stop()
    return step.old_logp, grads


def _same_update(model, processor, exp, mask, cache: bool = False, prepare=None):
    """One update of two copies of ``model`` (``prepare`` applied to each), unshared and shared:
    the same old log-probs, gradients (relative 1e-5, each tensor against the gradient's scale)
    and weights (1e-6). Returns the unshared copy."""
    off, on = copy.deepcopy(model).train(), copy.deepcopy(model).train()
    for m in (off, on):
        if prepare is not None:
            prepare(m)
    (lp_off, g_off), (lp_on, g_on) = (
        _updated(off, processor, exp, "off", cache),
        _updated(on, processor, exp, "on", cache),
    )
    m = mask.bool()
    assert torch.allclose(lp_on[m], lp_off[m], atol=1e-5, rtol=0)
    assert g_off.keys() == g_on.keys() and g_off
    flat_off = torch.cat([g.flatten() for g in g_off.values()])
    flat_on = torch.cat([g_on[n].flatten() for n in g_off])
    assert float((flat_on - flat_off).norm() / flat_off.norm()) < 1e-5
    largest = float(flat_off.abs().max())
    for name, g in g_off.items():
        assert float((g_on[name] - g).abs().max()) <= 1e-5 * largest, name
    start, after_off, after_on = model.state_dict(), off.state_dict(), on.state_dict()
    assert max(float((after_off[k] - start[k]).abs().max()) for k in start) > 1e-4  # it moved
    assert max(float((after_on[k] - after_off[k]).abs().max()) for k in start) < 1e-6
    return off


def _checkpointed(model) -> None:
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})


@pytest.mark.parametrize("family, checkpointing", [("qwen3_vl", False), ("qwen3_5", True)])
def test_one_update_equals_the_unshared_update(tmp_path, records, family, checkpointing):
    """Qwen3.5 with gradient checkpointing: its layers recomputed in the backward read the layout
    of the forward they recompute."""
    model, processor, exp = _setup(tmp_path, family, records)
    _same_update(model, processor, exp, exp.mask, prepare=_checkpointed if checkpointing else None)


def test_with_lora_the_adapter_and_its_adapter_free_reference(tmp_path, records):
    model, processor, exp = _setup(tmp_path, "qwen3_vl", records)
    base = copy.deepcopy(model)
    attach_lora(base, LoraConfig(rank=4))
    torch.manual_seed(0)
    with torch.no_grad():  # adapters that change the forward (peft starts them at zero)
        for name, p in base.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.05)
    off = _same_update(base, processor, exp, exp.mask)
    m = exp.mask.bool()
    with reference_forward(off), torch.no_grad():  # the reference: the adapter disabled
        ref_off, _ = experience_logprobs(_forward(off, processor, micro_batch_size=3), exp)
        ref_on, _ = experience_logprobs(_forward(off, processor, micro_batch_size=3, shared_prefix="on"), exp)
    assert torch.allclose(ref_on[m], ref_off[m], atol=1e-5, rtol=0)


def test_episodes_share_their_first_prompt_tool_turns_stay_their_own(tmp_path, records):
    """Replayed episodes (a seek, its frames, then the answer): each response carries its own
    tool turns and their frames after the one shared prompt; recomputed and served (a frozen
    tower's cached features) alike."""
    _setup(tmp_path, "qwen3_vl", records)
    model, processor, _, dataset = _SETUPS["qwen3_vl"]
    session = ToolSession(ToolsConfig(names=["seek"], seek_max_pixels=4096), dataset.cfg.model_family)
    dataset = copy.copy(dataset)
    dataset.tools = session.schemas()
    exp = build_episodes(processor, dataset, KINDS, session)
    assert sum(m is not None for m in exp.response_media) >= 2  # tool frames inside responses
    frozen = copy.deepcopy(model)
    for p in frozen.model.visual.parameters():
        p.requires_grad_(False)
    for cache in (False, True):
        _same_update(frozen, processor, exp, exp.real, cache=cache)


def test_prefix_tokens_saved_counts_each_shared_prompt_once(tmp_path, records):
    _, _, exp = _setup(tmp_path, "qwen3_vl", records)
    prompt = exp.batch.inputs["attention_mask"].sum(1)
    full = int(prompt.sum()) * 2 + int(exp.mask.sum())  # two responses per prompt
    shared = int(prompt.sum()) + int(exp.mask.sum())
    saved = prefix_tokens_saved(exp, Packing(micro_batch_size=8, shared_prefix="auto"))
    assert saved == pytest.approx(1 - shared / full)
    assert prefix_tokens_saved(exp, Packing(micro_batch_size=8)) == 0.0
    # one sequence per micro-batch: nothing repeats, nothing saved under auto
    assert prefix_tokens_saved(exp, Packing(micro_batch_size=1, shared_prefix="auto")) == 0.0


def test_a_model_keeps_its_own_attention_for_forwards_without_a_layout(tmp_path, records):
    """Installed, a model's forwards without a layout (generation, padded passes) run the
    implementation it had: sdpa here; flash-attention's packed rows still get their varlen inputs."""
    _, processor, exp = _setup(tmp_path, "qwen3_vl", records)
    model = load_policy(make_tiny_model(str(tmp_path / "fresh"), "qwen3_vl", layers=1))[0].eval()
    flash = copy.deepcopy(model)
    flash.config.text_config._attn_implementation = "flash_attention_2"
    install_shared_prefix(flash)
    assert flash.config.text_config._attn_implementation == SHARED_ATTENTION
    assert flash_text_attention(flash)  # the packed path keeps its cu_seqlens (GPU)
    plain = copy.deepcopy(model)
    install_shared_prefix(plain)
    assert not flash_text_attention(plain)
    rows, _, _ = response_rows(exp, [0, 1])
    with torch.no_grad():
        before = _forward(model, processor).logprobs(rows)[0]
        after = _forward(plain, processor).logprobs(rows)[0]
    assert torch.equal(before, after)
