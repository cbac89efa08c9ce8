"""HF rollouts: batched over prompts, EOS handling, banned tokens (even when the policy is pushed
towards them), log-prob alignment."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from easyvideor1.data.config import DataConfig
from easyvideor1.data.dataset import RecordDataset, encode_prompts
from easyvideor1.data.records import load_records
from easyvideor1.data.synthetic import write_synthetic_set
from easyvideor1.models.families import family_names, get_family
from easyvideor1.models.inputs import expand
from easyvideor1.models.logprobs import response_logprobs
from easyvideor1.models.tiny import build_tokenizer, make_tiny_model
from easyvideor1.models.vision import DummyVisionPass
from easyvideor1.rollout.base import SamplingConfig, banned_token_ids, cut_at_eos
from easyvideor1.rollout.hf import HFRolloutEngine

from .vllm_worker import banned_mass, push_towards_tokens


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("r")
    model_dir = make_tiny_model(str(d / "model"), "qwen3vl")
    data = write_synthetic_set(str(d / "syn"), 3, size=(64, 48), duration=1.0)
    cfg = DataConfig(
        model_family="qwen3vl", video_nframes=4, video_fps=None, video_min_pixels=1024, video_max_pixels=2048
    )
    ds = RecordDataset(load_records(data), cfg, data)
    model = AutoModelForImageTextToText.from_pretrained(model_dir)
    processor = AutoProcessor.from_pretrained(model_dir)
    return model, processor, ds


def test_cut_at_eos():
    seqs = torch.tensor([[5, 6, 2, 7], [5, 6, 7, 8], [2, 9, 9, 9]])
    ids, mask, truncated = cut_at_eos(seqs, [2], pad_id=0)
    assert ids.tolist() == [[5, 6, 2, 0], [5, 6, 7, 8], [2, 0, 0, 0]]
    assert mask.tolist() == [[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0]] and truncated == [False, True, False]


def test_batched_rollout_never_samples_vision_tokens_and_logprobs_align(setup):
    model, processor, ds = setup
    engine = HFRolloutEngine(model, processor)
    samples = [ds[0], ds[1], ds[6 if len(ds) > 6 else 2]]
    batch = encode_prompts(processor, samples, ds.cfg, ds.loader)
    torch.manual_seed(0)
    out = engine.generate(batch, [3, 0, 2], SamplingConfig(max_new_tokens=12))
    assert out.ids.shape[0] == 5 and len(out.texts) == 5
    assert not torch.isin(out.ids[out.mask.bool()], torch.tensor(engine.banned)).any()
    # greedy decoding must pick the argmax of the recomputed distribution at every step
    greedy = engine.generate(batch, [1, 1, 1], SamplingConfig(temperature=0, max_new_tokens=6))
    seq_inputs = expand(batch, [1, 1, 1])
    logp, entropy = response_logprobs(
        model, seq_inputs, greedy.ids, greedy.mask, engine.banned, dummy=DummyVisionPass(model)
    )
    full_logits = model(
        **{
            **seq_inputs,
            "input_ids": torch.cat([seq_inputs["input_ids"], greedy.ids], 1),
            "attention_mask": torch.cat([seq_inputs["attention_mask"], greedy.mask], 1),
            "mm_token_type_ids": torch.cat(
                [seq_inputs["mm_token_type_ids"], torch.zeros_like(greedy.ids)], 1
            ),
        }
    ).logits
    P = seq_inputs["input_ids"].shape[1]
    step_logits = full_logits[:, P - 1 : P - 1 + greedy.ids.shape[1]].clone()
    step_logits[..., engine.banned] = float("-inf")
    m = greedy.mask.bool()
    assert torch.equal(step_logits.argmax(-1)[m], greedy.ids[m])
    assert torch.isfinite(logp[m]).all() and (logp[m] <= 0).all() and (entropy[m] >= 0).all()


def test_every_family_bans_its_vision_placeholders():
    """The ban comes from the family adapters: each family's placeholders, as its tokenizer has them."""
    for name in family_names():
        tok = build_tokenizer(model_family=name)
        placeholders = tok.convert_tokens_to_ids(list(get_family(name).tokens.placeholder_tokens))
        assert set(placeholders) <= set(banned_token_ids(tok)), name


def test_a_policy_pushed_towards_vision_tokens_never_samples_one(setup):
    """Weights that make a vision placeholder all but certain at every step (veRL #7038: a sampled
    ``<|video_pad|>`` crashed a run's vision merge): sampled and greedy, none is drawn."""
    model, processor, ds = setup
    pushed = copy.deepcopy(model)
    engine = HFRolloutEngine(pushed, processor)
    assert {"<|video_pad|>", "<|image_pad|>", "<|vision_start|>"} <= set(
        processor.tokenizer.convert_ids_to_tokens(engine.banned)
    )
    push_towards_tokens(pushed, engine.banned)
    batch = encode_prompts(processor, [ds[0], ds[1], ds[2]], ds.cfg, ds.loader)
    torch.manual_seed(0)
    for temperature, repeats in ((1.0, [3, 3, 3]), (0.0, [1, 1, 1])):
        out = engine.generate(batch, repeats, SamplingConfig(temperature=temperature, max_new_tokens=12))
        m = out.mask.bool()
        assert m.any() and not torch.isin(out.ids[m], torch.tensor(engine.banned)).any()
        # without the ban, nearly every token would have been a placeholder
        assert float(banned_mass(pushed, batch, repeats, out, engine.banned).min()) > 0.99


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_rollout_logprobs_equal_the_training_forward(setup, temperature):
    model, processor, ds = setup
    engine = HFRolloutEngine(model, processor)
    batch = encode_prompts(processor, [ds[0], ds[1]], ds.cfg, ds.loader)
    torch.manual_seed(1)
    out = engine.generate(
        batch, [3, 2], SamplingConfig(temperature=temperature, max_new_tokens=10, return_logprobs=True)
    )
    recomputed, _ = response_logprobs(
        model,
        expand(batch, [3, 2]),
        out.ids,
        out.mask,
        engine.banned,
        temperature=temperature,
        dummy=DummyVisionPass(model),
    )
    m = out.mask.bool()
    torch.testing.assert_close(out.logprobs[m], recomputed[m], atol=2e-5, rtol=0)


def test_presence_penalty_counts_response_tokens_only():
    from easyvideor1.rollout.hf import PresencePenalty

    ids = torch.tensor([[5, 6, 7, 8], [5, 5, 9, 9]])  # prompt of 2 tokens, then 2 generated
    scores = torch.zeros(2, 12)
    out = PresencePenalty(1.5, prompt_len=2)(ids, scores)
    assert out[0, 7] == out[0, 8] == -1.5 and out[0, 5] == 0 and out[0, 6] == 0  # prompt tokens free
    assert out[1, 9] == -1.5 and (out[1] != 0).sum() == 1  # presence, not frequency: once per token
    assert torch.equal(PresencePenalty(1.5, prompt_len=4)(ids, scores), scores)  # nothing generated yet


def test_a_cancelled_request_stops_at_once_and_leaves_its_batch_mates_unchanged(setup):
    """The request path's :class:`Progress`: each token is reported as sampled; a request cancelled
    after three tokens stops there, and the request beside it in the batch is as it is alone."""
    from easyvideor1.rollout.base import Progress, Prompt, Request

    model, processor, _ = setup
    engine = HFRolloutEngine(model, processor)
    greedy = SamplingConfig(temperature=0, max_new_tokens=40)
    chat = [{"role": "user", "content": [{"type": "text", "text": "say something"}]}]
    prompt = Prompt(processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True))
    seen: list[tuple[int, int]] = []

    def watch(row: int, token: int) -> None:
        seen.append((row, token))
        if len(seen) == 3:
            cancelling.cancelled.set()

    cancelling = Progress(on_token=watch)
    alone = engine.run_batch([Request("alone", prompt, greedy, n=2)])[0]
    together = engine.run_batch(
        [Request("kept", prompt, greedy, n=2), Request("gone", prompt, greedy, progress=cancelling)]
    )
    assert together[0].texts == alone.texts and together[0].ids.tolist() == alone.ids.tolist()
    assert seen == [(0, t) for t in alone.ids[0, :3].tolist()]  # nothing after the cancellation
