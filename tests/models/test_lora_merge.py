"""``merged_state_dict``: peft's own ``merge_and_unload()`` is the reference, bit for bit in fp32.

A real tiny Qwen3-VL (vision tower included) wrapped with ``peft.get_peft_model``; small toy modules
for what the VL model cannot show (``fan_in_fan_out`` Conv1D, ``lora_bias``). The FSDP2 case runs
under ``torchrun`` with two gloo ranks.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

peft = pytest.importorskip("peft")

from easyvideor1.models.lora_merge import has_lora, merged_state_dict  # noqa: E402
from easyvideor1.models.tiny import make_tiny_model  # noqa: E402

from .lora_merge_worker import build  # noqa: E402

WORKER = Path(__file__).with_name("lora_merge_worker.py")


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, one_thread) -> str:
    return make_tiny_model(str(tmp_path_factory.mktemp("tiny")))


def _reference(model) -> dict[str, torch.Tensor]:
    """peft's merge on a copy (merge_and_unload mutates the model it is given)."""
    return {k: v.detach() for k, v in copy.deepcopy(model).merge_and_unload().state_dict().items()}


def _snapshot(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _assert_same(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert list(got) == list(want)
    differ = [k for k in want if not torch.equal(got[k], want[k])]
    assert not differ, differ[:5]


def test_plain_model_gives_its_own_state_dict(model_dir) -> None:
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(model_dir)
    assert not has_lora(model)
    _assert_same(dict(merged_state_dict(model)), model.state_dict())


def test_peft_model_equals_merge_and_unload_and_is_left_untouched(model_dir) -> None:
    from transformers import AutoModelForImageTextToText

    base_keys = list(AutoModelForImageTextToText.from_pretrained(model_dir).state_dict())
    model = build(model_dir)
    assert has_lora(model)
    kinds = {type(m).__name__ for m in model.modules() if isinstance(m, peft.tuners.lora.LoraLayer)}
    assert kinds == {"Linear", "Embedding"}  # language and vision linears, and the embedding
    before = _snapshot(model)
    got = dict(merged_state_dict(model))
    assert list(got) == base_keys  # the base model's HF names, nothing of peft's
    _assert_same(got, _reference(model))
    _assert_same(_snapshot(model), before)  # no in-place merge / unmerge happened
    changed = [k for k in got if "q_proj" in k and not torch.equal(got[k], before[_peft_key(model, k)])]
    assert changed, "the adapters changed nothing: the comparison would prove nothing"


def _peft_key(model, name: str) -> str:
    """The wrapped model's key for a base name (base_layer inserted for adapted modules)."""
    key = "base_model.model." + name
    if key in model.state_dict():
        return key
    head, leaf = key.rsplit(".", 1)
    return f"{head}.base_layer.{leaf}"


def test_two_active_adapters_disabled_adapters_and_modules_to_save(model_dir) -> None:
    from peft import LoraConfig
    from transformers import AutoModelForImageTextToText

    model = build(model_dir)
    model.add_adapter("second", LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "o_proj"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B.second" in name:
                p.normal_(0, 0.05)
    model.base_model.set_adapter(["default", "second"])  # both merged, in this order
    _assert_same(dict(merged_state_dict(model)), _reference(model))
    with model.disable_adapter():  # the KL reference's view: the base weights exactly
        base = {k: v for k, v in merged_state_dict(model)}
    plain = AutoModelForImageTextToText.from_pretrained(model_dir).state_dict()
    _assert_same(base, plain)

    wrapped = peft.get_peft_model(
        AutoModelForImageTextToText.from_pretrained(model_dir),
        LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj"], modules_to_save=["lm_head"]),
    )
    with torch.no_grad():
        for name, p in wrapped.named_parameters():
            if "modules_to_save" in name or "lora_B" in name:
                p.add_(0.1)
    got = dict(merged_state_dict(wrapped))
    _assert_same(got, _reference(wrapped))
    assert not torch.equal(got["lm_head.weight"], plain["lm_head.weight"])  # the trained copy won


class _Toy(torch.nn.Module):
    """A GPT-2 style Conv1D (weight stored transposed: fan_in_fan_out) and a biased Linear."""

    def __init__(self) -> None:
        from transformers.pytorch_utils import Conv1D

        super().__init__()
        self.c_attn = Conv1D(12, 8)
        self.proj = torch.nn.Linear(12, 6, bias=True)

    def forward(self, x):
        return self.proj(self.c_attn(x))


@pytest.mark.parametrize("lora_bias", [False, True])
def test_fan_in_fan_out_and_lora_bias(lora_bias) -> None:
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    base = _Toy()
    keys = list(base.state_dict())
    cfg = LoraConfig(
        r=2, lora_alpha=3, target_modules=["c_attn", "proj"], fan_in_fan_out=True, lora_bias=lora_bias
    )
    with pytest.warns(UserWarning, match="fan_in_fan_out"):  # peft resets it for the nn.Linear
        model = get_peft_model(base, cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_()
    got = dict(merged_state_dict(model))
    assert list(got) == keys
    _assert_same(got, _reference(model))
    x = torch.randn(3, 8)
    merged = _Toy()
    merged.load_state_dict(got)
    torch.testing.assert_close(merged(x), model(x))  # the merged weights compute the adapted function


def test_bf16_rounds_once_and_stays_close_to_peft(model_dir) -> None:
    model = build(model_dir, dtype=torch.bfloat16)
    got, want = dict(merged_state_dict(model)), _reference(model)
    assert list(got) == list(want) and all(got[k].dtype == torch.bfloat16 for k in got)
    for k in want:  # at most one bf16 ulp apart (peft rounds the delta before adding it)
        torch.testing.assert_close(got[k], want[k], rtol=2**-7, atol=1e-4, msg=k)


def test_dora_is_refused_by_name(model_dir) -> None:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    base = AutoModelForImageTextToText.from_pretrained(model_dir)
    model = get_peft_model(base, LoraConfig(r=2, target_modules=["v_proj"], use_dora=True))
    with pytest.raises(NotImplementedError, match=r"layers\.0\.self_attn\.v_proj: .*DoRA"):
        next(iter(merged_state_dict(model)))


@pytest.mark.slow
def test_fsdp2_sharded_peft_model_gathers_the_same_merged_weights(model_dir, tmp_path) -> None:
    from safetensors.torch import load_file

    out = tmp_path / "merged.safetensors"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc-per-node=2",
        f"--master-port={_free_port()}",
    ]
    r = subprocess.run(
        [*cmd, str(WORKER), model_dir, str(out)], capture_output=True, text=True, timeout=300, env=env
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    got, want = load_file(str(out)), _reference(build(model_dir))
    _assert_same(dict(sorted(got.items())), dict(sorted(want.items())))  # safetensors sorts its keys
