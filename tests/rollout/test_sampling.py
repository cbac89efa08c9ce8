"""Every sampling key changes what the engines are asked for: HF ``generate``'s arguments (its
logits processors included) and vLLM's ``SamplingParams``, each built from one
:class:`~easyvideor1.rollout.sampling.SamplingConfig` (no vLLM engine is started)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from transformers import AutoModelForImageTextToText, AutoProcessor, Cache

from easyvideor1.data.dataset import encode_prompts
from easyvideor1.models.inputs import expand
from easyvideor1.rollout.hf import HFRolloutEngine, PresencePenalty
from easyvideor1.rollout.sampling import SAMPLING_KEYS, SamplingConfig
from tests.rollout.test_hf_rollout import setup  # noqa: F401  (the tiny model and dataset fixture)

BASE = SamplingConfig(max_new_tokens=4)
# a value other than BASE's for every key (a new key must be added here, or this test fails)
CHANGED = {
    "temperature": 0.5,
    "top_p": 0.9,
    "top_k": 5,
    "max_new_tokens": 3,
    "min_new_tokens": 2,
    "presence_penalty": 1.5,
    "return_logprobs": True,
}


def test_every_sampling_key_has_a_changed_value() -> None:
    assert set(CHANGED) == set(SAMPLING_KEYS)
    assert all(CHANGED[k] != getattr(BASE, k) for k in SAMPLING_KEYS)


@pytest.fixture(scope="module")
def tiny(setup):  # noqa: F811  (the imported fixture, requested by name)
    """A tiny Qwen3-VL (its directory) and a one-video dataset (``test_hf_rollout``'s)."""
    model, _, ds = setup
    return model.name_or_path, ds


def _hf_request(engine: HFRolloutEngine, batch, sampling: SamplingConfig) -> dict:
    """The arguments the HF engine hands ``model.generate`` for ``sampling`` (it still generates)."""
    seen: dict = {}
    generate = engine.model.generate

    def spy(**kwargs):
        seen.update(kwargs)
        return generate(**kwargs)

    engine.model.generate = spy
    try:
        engine.generate(batch, [1], sampling)
    finally:
        del engine.model.generate
    processors = seen.pop("logits_processor", None) or []
    seen["logits_processor"] = [(type(p).__name__, vars(p)) for p in processors]
    # the inputs (tensors, and the prompt's prefilled cache, a new object each call) are no sampling
    return {k: v for k, v in seen.items() if not isinstance(v, (torch.Tensor, Cache))}


@pytest.mark.parametrize("key", SAMPLING_KEYS)
def test_each_sampling_key_changes_the_hf_generate_call(tiny, key) -> None:
    model_dir, ds = tiny
    processor = AutoProcessor.from_pretrained(model_dir)
    engine = HFRolloutEngine(AutoModelForImageTextToText.from_pretrained(model_dir), processor)
    batch = encode_prompts(processor, [ds[0]], ds.cfg, ds.loader)
    changed = dataclasses.replace(BASE, **{key: CHANGED[key]})
    assert _hf_request(engine, batch, changed) != _hf_request(engine, batch, BASE), key


def test_presence_penalty_reaches_hf_as_a_logits_processor_that_lowers_seen_tokens(tiny) -> None:
    model_dir, ds = tiny
    processor = AutoProcessor.from_pretrained(model_dir)
    engine = HFRolloutEngine(AutoModelForImageTextToText.from_pretrained(model_dir), processor)
    batch = encode_prompts(processor, [ds[0]], ds.cfg, ds.loader)
    request = _hf_request(engine, batch, dataclasses.replace(BASE, presence_penalty=1.5, min_new_tokens=2))
    (name, state), prompt_len = request["logits_processor"][0], expand(batch, [1])["input_ids"].shape[1]
    assert (name, state) == ("PresencePenalty", {"penalty": 1.5, "prompt_len": prompt_len})
    assert request["min_new_tokens"] == 2 and request["eos_token_id"] == engine.eos_ids
    # the logits it hands the sampler: every token already in the response is 1.5 lower
    ids = torch.tensor([[1, 2, 3, 7, 7, 9]])
    scores = torch.randn(1, 16)
    out = PresencePenalty(1.5, prompt_len=3)(ids, scores)
    assert torch.equal(out[0, [7, 9]], scores[0, [7, 9]] - 1.5)
    assert torch.equal(out[0, [1, 2, 3, 4]], scores[0, [1, 2, 3, 4]])


def _vllm_params(responses, sampling: SamplingConfig) -> dict:
    params = responses.sampling_params(sampling)
    fields = ("temperature", "top_p", "top_k", "max_tokens", "min_tokens", "presence_penalty", "logprobs")
    return {f: getattr(params, f) for f in fields}


@pytest.mark.parametrize("key", SAMPLING_KEYS)
def test_each_sampling_key_changes_the_vllm_sampling_params(tiny, key) -> None:
    pytest.importorskip("vllm")
    from easyvideor1.rollout.vllm_shared import VLLMResponses

    model_dir, _ = tiny
    responses = VLLMResponses(model_dir, AutoProcessor.from_pretrained(model_dir))
    changed = dataclasses.replace(BASE, **{key: CHANGED[key]})
    assert _vllm_params(responses, changed) != _vllm_params(responses, BASE), key
    if key == "presence_penalty":
        assert _vllm_params(responses, changed)["presence_penalty"] == 1.5
    if key == "min_new_tokens":
        assert _vllm_params(responses, changed)["min_tokens"] == 2
