"""The step speed-ups (issue 13 part 2) change speed, not results: token-budget micro-batches give
the fixed-count update, reused vision features equal re-encoded ones (and the tower runs once per
step; after new tower weights they are the new weights' features), and all speed-ups on give the
weights of all off, in one process and on two ranks (gloo)."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from easyvideor1.data.config import DataConfig
from easyvideor1.data.dataset import RecordDataset
from easyvideor1.models.loading import load_policy
from easyvideor1.models.logprobs import Packing, PolicyForward
from easyvideor1.models.vision import DummyVisionPass, vision_tower
from easyvideor1.models.vision_cache import VisionFeatureCache
from easyvideor1.resolve import resolve_data
from easyvideor1.rollout.base import banned_token_ids
from easyvideor1.trainer.update import (
    UpdateSettings,
    experience_logprobs,
    policy_update,
    token_micro_batches,
)
from tests.conftest import write_modality_records

from .conftest import run_worker
from .dist_worker import KINDS, build_experience

HERE = Path(__file__).parent


@pytest.fixture(autouse=True, scope="module")
def _one_thread(one_thread):
    yield


@pytest.fixture(scope="module")
def records(tmp_path_factory) -> str:
    return write_modality_records(tmp_path_factory.mktemp("speed"), 4, 1)


@pytest.fixture(scope="module")
def setup(demo_assets, records):
    model, processor = load_policy(demo_assets["model"], freeze_vision_tower=True)
    model.train()
    cfg = resolve_data(DataConfig(video_fps=None, video_nframes=4), demo_assets["model"])
    exp = build_experience(processor, RecordDataset.from_files([records], cfg), list(KINDS))
    return model, processor, exp


def _step(
    model, processor, exp, *, on_budget=0, padding_free=False, cache=None, epochs=2, calls=None, shared="off"
):
    """Old log-probs and one SGD step of ``epochs`` passes on a copy of ``model``; returns the copy,
    the old log-probs and the feature cache (``calls`` collects vision-tower calls)."""
    model = copy.deepcopy(model)
    if calls is not None:
        vision_tower(model).register_forward_hook(lambda *a: calls.append(1))
    dummy, banned = DummyVisionPass(model), banned_token_ids(processor.tokenizer)
    cache = VisionFeatureCache([model]) if cache else None
    if cache is not None:
        cache.start(exp.batch)
    exp = copy.copy(exp)
    packing = Packing(
        padding_free=padding_free, max_tokens=on_budget, micro_batch_size=3, shared_prefix=shared
    )
    forward = PolicyForward(model, dummy, cache, banned, packing=packing)
    exp.old_logp, _ = experience_logprobs(forward, exp)
    settings = UpdateSettings(max_grad_norm=1e9)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    everything = list(range(len(exp)))
    policy_update(forward, opt, None, exp, [everything] * epochs, settings)
    return model, exp.old_logp, cache


@pytest.fixture(scope="module")
def all_off(setup):
    """The step with every speed-up off: padded, 3 sequences per micro-batch, re-encoding."""
    model, processor, exp = setup
    calls: list[int] = []
    out = _step(model, processor, exp, calls=calls)
    return (*out, len(calls))


def _max_diff(a, b) -> float:
    sb = b.state_dict()
    return max(float((v - sb[k]).abs().max()) for k, v in a.state_dict().items())


def test_token_budget_micro_batches_respect_the_budget(setup):
    _, _, exp = setup
    idx = list(range(len(exp)))
    width = exp.batch.inputs["input_ids"].shape[1]
    for packing in (Packing(False), Packing(True), Packing(shared_prefix="on")):
        for budget in (1, 150, 400, 10**6):
            chunks = token_micro_batches(exp, idx, budget, packing)
            assert [i for c in chunks for i in c] == idx
            for c in chunks:
                resp = exp.mask[c].sum(1)
                prompt = exp.batch.inputs["attention_mask"][[exp.prompt_of[i] for i in c]].sum(1)
                if packing.shared_prefix == "on":  # each prompt of the micro-batch once
                    size = int(resp.sum()) + sum(
                        int(exp.batch.inputs["attention_mask"][p].sum())
                        for p in {exp.prompt_of[i] for i in c}
                    )
                elif packing.padding_free:
                    size = int((prompt + resp).sum())
                else:
                    size = len(c) * (width + int(resp.max()))
                assert size <= budget or len(c) == 1
        assert len(token_micro_batches(exp, idx, 1, packing)) == len(exp)
        assert len(token_micro_batches(exp, idx, 10**6, packing)) == 1


def test_token_budget_gives_the_fixed_count_update(setup, all_off):
    model, processor, exp = setup
    fixed = all_off[0]
    budget, _, _ = _step(model, processor, exp, on_budget=400)  # 2 rows per padded forward
    assert _max_diff(fixed, model) > 1e-4  # the step moved the weights
    assert _max_diff(fixed, budget) < 1e-5


def test_reused_vision_features_equal_recomputed_and_encode_once(setup, all_off):
    model, processor, exp = setup
    fresh, fresh_logp, _, fresh_calls = all_off
    calls: list[int] = []
    reused, reused_logp, cache = _step(model, processor, exp, cache=True, calls=calls)
    assert torch.equal(fresh_logp, reused_logp)
    assert _max_diff(fresh, reused) < 1e-6
    # the whole step (old log-probs, then 2 epochs of 3 micro-batches) calls the tower once per
    # modality; re-encoding calls it in every forward (real or dummy)
    assert len(calls) == cache.encodes == 2 and cache.served >= 6
    assert fresh_calls >= 2 * 9


def _served_step(model, cache: VisionFeatureCache, batch) -> torch.Tensor:
    """One step's forward over every prompt of ``batch``, its features from the cache."""
    cache.start(batch)
    try:
        with torch.no_grad(), cache.serving(list(range(len(batch)))):
            return model(**batch.inputs).logits
    finally:
        cache.stop()


def test_features_served_after_new_tower_weights_equal_a_fresh_computation(setup):
    """The cache keys features by the step, not the weights: what it serves after the tower's
    weights change (between steps, the only place a frozen tower's can) is computed with them."""
    model, _, exp = setup
    model = copy.deepcopy(model)
    cache = VisionFeatureCache([model])
    before = _served_step(model, cache, exp.batch)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # new tower weights, as a load between steps writes them
        for p in vision_tower(model).parameters():
            p.add_(torch.randn(p.shape, generator=generator) * 0.05)
    after = _served_step(model, cache, exp.batch)
    with torch.no_grad():
        fresh = model(**exp.batch.inputs).logits
    assert cache.encodes == 4  # each step encoded its videos and images once
    torch.testing.assert_close(after, fresh, atol=1e-6, rtol=0)
    assert float((before - fresh).abs().max()) > 1e-3  # the new weights change what is served


def test_a_trainable_tower_is_refused(setup):
    """Within a step nothing may change the tower: the cache refuses one that could train."""
    model, _, exp = setup
    model = copy.deepcopy(model)
    vision_tower(model).blocks[0].attn.qkv.weight.requires_grad_(True)
    with pytest.raises(
        RuntimeError, match=r"trainable tower \(.*blocks\.0\.attn\.qkv\.weight requires grad\)"
    ):
        VisionFeatureCache([model]).start(exp.batch)


def test_all_on_equals_all_off_one_process(setup, all_off):
    model, processor, exp = setup
    off, off_logp = all_off[:2]
    on, on_logp, cache = _step(
        model, processor, exp, on_budget=150, padding_free=True, cache=True, shared="on"
    )
    assert cache.encodes == 2  # each prompt's features served once per shared row
    m = exp.mask.bool()
    assert torch.allclose(on_logp[m], off_logp[m], atol=1e-5, rtol=0)
    assert _max_diff(off, on) < 1e-5


@pytest.mark.slow
def test_all_on_on_two_ranks_equals_all_off_in_one_process(demo_assets, records, tmp_path):
    single, double = tmp_path / "off.safetensors", tmp_path / "on2.safetensors"
    run_worker("speedups_worker.py", demo_assets["model"], records, str(single), "--all-off")
    run_worker("speedups_worker.py", demo_assets["model"], records, str(double), "--all-on", ranks=2)
    with safe_open(str(single), "pt") as a, safe_open(str(double), "pt") as b:
        assert set(a.keys()) == set(b.keys())
        worst = max(float((a.get_tensor(k) - b.get_tensor(k)).abs().max()) for k in a.keys())
        assert json.loads(b.metadata()["metrics"])["encodes"] >= 1
    assert worst < 1e-5


@pytest.mark.parametrize(
    "kw, key",
    [
        ({"padding_free": "yes"}, "trainer.padding_free"),
        ({"max_tokens_per_micro_batch": -1}, "trainer.max_tokens_per_micro_batch"),
        ({"max_tokens_per_micro_batch": 1.5}, "trainer.max_tokens_per_micro_batch"),
        ({"shared_prefix": "yes"}, "trainer.shared_prefix"),
    ],
)
def test_bad_settings_name_their_key(kw, key):
    from easyvideor1.trainer.config import TrainerConfig

    with pytest.raises(ValueError, match=key.replace(".", r"\.")):
        TrainerConfig(**kw)


def test_shared_prefix_reads_yaml_on_and_off(make_cfg):
    # YAML reads a bare on/off as a boolean, which the string field then holds as "True"/"False"
    assert make_cfg("trainer.shared_prefix=on").trainer.shared_prefix == "on"
    assert make_cfg("trainer.shared_prefix=off").trainer.shared_prefix == "off"
    assert make_cfg().trainer.shared_prefix == "auto"


def test_trainer_step_with_every_speed_up_on(make_cfg):
    """The Trainer wiring: one RL step (reference model, KL loss) with all three on; the frozen
    tower's features are encoded once and served to the old, reference and actor forwards."""
    from math import isfinite

    from easyvideor1.trainer.loop import Trainer

    cfg = make_cfg(
        "model.freeze_vision_tower=true",
        "trainer.padding_free=true",
        "trainer.max_tokens_per_micro_batch=300",
        "algorithm.kl.type=k3",
        "algorithm.kl.apply_as=loss",
        "trainer.max_steps=1",
        "trainer.val_size=0",
        "trainer.resume=never",
    )
    trainer = Trainer(cfg)
    metrics = trainer.rl_step()
    cache = trainer.parts.forward.vision
    assert cache is not None and not cache.active  # stopped after the update
    assert cache.encodes == 1 and cache.served >= 3  # videos only; old + reference + actor
    assert all(isfinite(v) for v in metrics.values())
    # shared prefixes (auto, the default): each micro-batch's repeated prompts read once
    assert 0 < metrics["perf/prefix_tokens_saved"] < 1
    trainer.close()


def test_to_device_pins_and_copies_without_blocking_only_to_a_gpu(monkeypatch):
    """The decision, recorded: to a CUDA device a host tensor is pinned (unless it is already) and
    copied with ``non_blocking``; on the CPU nothing is pinned or copied (pin_memory needs an
    accelerator)."""
    from easyvideor1.models.inputs import to_device

    pixels, grid = torch.ones(4, 3), torch.tensor([[1, 2, 2]])
    same = to_device({"pixel_values": pixels, "n": 3}, "cpu")
    assert same["pixel_values"] is pixels and same["n"] == 3
    calls: list[tuple] = []
    monkeypatch.setattr(torch.Tensor, "is_pinned", lambda self: self is grid)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: calls.append(("pin", self.shape)) or self)
    monkeypatch.setattr(
        torch.Tensor, "to", lambda self, *a, **k: calls.append(("to", self.shape, a, k)) or self
    )
    to_device({"pixel_values": pixels, "grid": grid}, "cuda")
    cuda = torch.device("cuda")
    assert calls == [
        ("pin", pixels.shape),
        ("to", pixels.shape, (cuda,), {"non_blocking": True}),
        ("to", grid.shape, (cuda,), {"non_blocking": True}),  # pinned already: no host copy
    ]


class _OnDevice(torch.Tensor):
    """Marks the pixels a step moved to the device: slices and concatenations of it stay marked."""


def test_a_steps_micro_batches_take_their_pixels_from_one_device_copy(make_cfg, monkeypatch):
    """One RL step (old, reference and actor forwards, padded micro-batches of 2): the step's
    pixels are moved to the device once, and every forward's pixels come from that copy (a pixel
    tensor gathered anew from the host would not carry the mark)."""
    from easyvideor1.models import inputs
    from easyvideor1.trainer import step
    from easyvideor1.trainer.loop import Trainer

    moves: list[int] = []

    def mark(batch, own, device):
        moves.append(1)
        batch, own = inputs.pixels_to_device(batch, own, device)
        marked = {k: v.as_subclass(_OnDevice) for k, v in batch.inputs.items() if k in inputs.PIXEL_KEYS}
        return dataclasses.replace(batch, inputs={**batch.inputs, **marked}), own

    monkeypatch.setattr(step, "pixels_to_device", mark)
    cfg = make_cfg(
        "trainer.micro_batch_size=2",
        "algorithm.kl.type=k3",
        "algorithm.kl.apply_as=loss",
        "trainer.max_steps=1",
        "trainer.val_size=0",
        "trainer.resume=never",
    )
    trainer = Trainer(cfg)
    seen: list[bool] = []

    def check(module, args, kwargs):
        if kwargs.get("use_cache"):  # the rollout's prefill (generation): its own prompt batch
            return args, kwargs
        for key in inputs.PIXEL_KEYS:
            if isinstance(kwargs.get(key), torch.Tensor):
                seen.append(isinstance(kwargs[key], _OnDevice))
                kwargs[key] = kwargs[key].as_subclass(torch.Tensor)
        return args, kwargs

    for model in (trainer.parts.model, trainer.parts.ref_model):
        model.register_forward_pre_hook(check, with_kwargs=True)
    trainer.rl_step()
    trainer.close()
    assert moves == [1]
    assert len(seen) >= 3 and all(seen)  # old + reference + actor forwards, every one from the copy
