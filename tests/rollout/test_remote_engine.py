"""The HF engine in a process of its own (``rollout.placement: separate``): a real child process
over pipes, safetensors frames both ways, compared with the same engine in this process."""

from __future__ import annotations

import io

import pytest
import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from easyvideor1.data.config import DataConfig
from easyvideor1.data.dataset import RecordDataset, encode_prompts
from easyvideor1.data.records import load_records
from easyvideor1.data.synthetic import write_synthetic_set
from easyvideor1.errors import UserError
from easyvideor1.models.tiny import make_tiny_model
from easyvideor1.rollout.base import SamplingConfig
from easyvideor1.rollout.hf import HFRolloutEngine
from easyvideor1.rollout.remote import RemoteHFEngine, read_frame, write_frame


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("remote")
    model_dir = make_tiny_model(str(d / "model"), "qwen3vl")
    data = write_synthetic_set(str(d / "syn"), 2, size=(64, 48), duration=1.0)
    cfg = DataConfig(
        model_family="qwen3vl", video_nframes=4, video_fps=None, video_min_pixels=1024, video_max_pixels=2048
    )
    ds = RecordDataset(load_records(data), cfg, data)
    model = AutoModelForImageTextToText.from_pretrained(model_dir).eval()
    processor = AutoProcessor.from_pretrained(model_dir)
    batch = encode_prompts(processor, [ds[0], ds[1]], ds.cfg, ds.loader)
    remote = RemoteHFEngine(model_dir, processor, model, threads=1, seed=0)
    yield model, processor, batch, remote
    remote.close()


def test_frames_round_trip_without_pickles():
    buf = io.BytesIO()
    tensors = {"a": torch.arange(6).reshape(2, 3), "b": torch.ones(2, dtype=torch.bfloat16)}
    write_frame(buf, {"op": "x", "n": [1, 2]}, tensors)
    write_frame(buf, {"op": "y"})
    buf.seek(0)
    header, got = read_frame(buf)
    assert header == {"op": "x", "n": [1, 2]} and torch.equal(got["a"], tensors["a"])
    assert got["b"].dtype == torch.bfloat16
    assert read_frame(buf) == ({"op": "y"}, {})
    with pytest.raises(EOFError):
        read_frame(buf)


def test_the_child_generates_what_this_process_would_and_takes_pushed_weights(setup):
    model, processor, batch, remote = setup
    local = HFRolloutEngine(model, processor)
    greedy = SamplingConfig(temperature=0, max_new_tokens=8, return_logprobs=True)
    here, there = local.generate(batch, [1, 2], greedy), remote.generate(batch, [1, 2], greedy)
    assert torch.equal(here.ids, there.ids) and torch.equal(here.mask, there.mask)
    assert here.texts == there.texts and here.truncated == there.truncated
    assert torch.allclose(here.logprobs, there.logprobs, atol=1e-5)
    # new weights pushed (in several chunks): the child generates with them
    changed = {
        k: v + 0.05 * torch.randn_like(v) if v.is_floating_point() else v
        for k, v in model.state_dict().items()
    }
    model.load_state_dict(changed)
    import easyvideor1.rollout.remote as remote_module

    chunk, remote_module.WEIGHT_CHUNK_BYTES = remote_module.WEIGHT_CHUNK_BYTES, 1 << 16
    try:
        remote.update_weights(model.state_dict().items())
    finally:
        remote_module.WEIGHT_CHUNK_BYTES = chunk
    here, there = local.generate(batch, [1, 1], greedy), remote.generate(batch, [1, 1], greedy)
    assert torch.equal(here.ids, there.ids)
    assert torch.allclose(here.logprobs, there.logprobs, atol=1e-5)
    # a bad request fails with the child's reason, and the child keeps serving
    with pytest.raises(RuntimeError, match="rollout engine process, weights: KeyError"):
        remote.update_weights([("no.such.weight", torch.zeros(1))])
    assert remote.generate(batch, [1, 0], greedy).ids.shape[0] == 1
    # the child's user error (a setting it refuses) stays a user error here: one line at the CLI
    unusable = SamplingConfig(temperature=0, max_new_tokens=8)
    unusable.temperature = -1.0  # past this side's check, as a request from elsewhere could be
    with pytest.raises(
        UserError, match="rollout engine process, generate: ConfigError: sampling.temperature must be >= 0"
    ):
        remote.generate(batch, [1, 0], unusable)
    assert remote.generate(batch, [1, 0], greedy).ids.shape[0] == 1
