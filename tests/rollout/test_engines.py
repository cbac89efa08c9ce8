"""The engine registry: the kinds a config may name, the two constructors of each, a kind added by
registering it, and unknown names refused before any model loads."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from easyvideor1.config import ConfigError, RunConfig, load_config
from easyvideor1.evaluation.config import EvalConfig
from easyvideor1.rollout import engines
from easyvideor1.rollout.engines import (
    ENGINES,
    engine_names,
    load_engine,
    make_rollout_engine,
    register_engine,
)


def test_builtin_kinds_are_the_config_choices():
    assert engine_names() == ("hf", "vllm")
    with pytest.raises(ConfigError, match="rollout.engine must be one of hf, vllm"):
        load_config(RunConfig, None, ["rollout.engine=sglang"])
    with pytest.raises(ValueError, match="eval.engine: 'sglang' is not one of hf, vllm"):
        EvalConfig(engine="sglang")


def test_checking_an_engine_name_loads_no_torch():
    code = (
        "import sys; from easyvideor1.rollout.engines import engine_names; "
        "assert engine_names() == ('hf', 'vllm'); assert 'torch' not in sys.modules, 'torch loaded'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_registered_kind_serves_and_trains(monkeypatch, tmp_path):
    made = []

    def train(request):
        made.append(("train", request.model, request.rank, request.seed, request.owns_weights))
        return "training engine"

    def serve(request):
        made.append(("serve", request.model, request.dtype, request.max_batch))
        return "serving engine", "processor"

    monkeypatch.setattr(ENGINES, "_entries", dict(ENGINES._entries))
    monkeypatch.setattr(ENGINES, "_keys", dict(ENGINES._keys))
    register_engine("echo", train=train, serve=serve)
    assert "echo" in engine_names()
    assert load_engine(str(tmp_path), "echo", "bfloat16", max_batch=2) == ("serving engine", "processor")
    cfg = SimpleNamespace(rollout=SimpleNamespace(engine="echo"), trainer=SimpleNamespace(seed=5))
    state = SimpleNamespace(rank=1, world=2, device=None)
    assert make_rollout_engine(cfg, None, "policy", state, owns_weights=True) == "training engine"
    assert made == [("serve", str(tmp_path), "bfloat16", 2), ("train", "policy", 1, 5 + 1_000_003, True)]
    # a second kind under a taken name is refused
    with pytest.raises(ValueError, match="already registered"):
        register_engine("echo", train=serve, serve=train)


def test_unknown_kind_is_a_user_error_naming_the_known_ones():
    with pytest.raises(engines.ENGINES.error, match="unknown rollout engine 'vlm'.*did you mean 'vllm'"):
        load_engine("/nowhere", "vlm", "float32")


def test_hf_serving_loads_the_checkpoint(tmp_path):
    from easyvideor1.models.tiny import make_tiny_model
    from easyvideor1.rollout.hf import HFRolloutEngine

    model_dir = make_tiny_model(str(tmp_path / "m"), "qwen3vl")
    engine, processor = load_engine(model_dir, "hf", "float32", max_batch=3)
    try:
        assert isinstance(engine, HFRolloutEngine) and engine.max_batch == 3 and not engine.owns_weights
        assert processor.tokenizer is not None
    finally:
        engine.close()
