"""A group's n samples share its prompt in every engine.

HF: the vision tower encodes the video once and the language model reads the prompt's tokens once
for the group's n samples (counted with forward hooks on tiny real models), and the responses and
their log-probs are those of ``generate`` over the group's n copies of the prompt (the unshared
path, reached here only). vLLM: a group is one request (``SamplingParams.n``), whose n children
share the prompt's KV blocks through prefix caching (measured with vLLM's counters).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForImageTextToText, AutoProcessor

from easyvideor1.data.config import DataConfig
from easyvideor1.data.dataset import RecordDataset, encode_prompts
from easyvideor1.data.records import load_records
from easyvideor1.data.synthetic import write_synthetic_set
from easyvideor1.models.families import get_family
from easyvideor1.models.inputs import expand, to_device
from easyvideor1.models.tiny import make_tiny_model
from easyvideor1.resolve import resolve_data
from easyvideor1.rollout.base import SamplingConfig
from easyvideor1.rollout.hf import HFRolloutEngine
from tests.rollout.test_sampling import CHANGED
from tests.rollout.test_vllm_engine import run_worker

COUNTED = ["qwen2_5_vl", "qwen3_vl", "internvl"]
# M-RoPE (Qwen2.5/3-VL, GLM-4.1V), 1-D RoPE (InternVL), gated-DeltaNet layers (Qwen3.5)
EXACT = [*COUNTED, "glm4v", "qwen3_5"]
N = 4
NEW_TOKENS = 5


@pytest.fixture(scope="module")
def records(tmp_path_factory):
    """One video prompt and one shorter text-only prompt (batched together they are left-padded)."""
    d = tmp_path_factory.mktemp("sharing")
    syn = write_synthetic_set(str(d), 1, size=(64, 48), duration=1.0)
    video = json.loads(open(syn).readline())
    text = {
        "problem_id": "text",
        "problem": "What is two plus three?",
        "answer": "5",
        "problem_type": "numerical",
    }
    path = d / "mixed.jsonl"
    path.write_text(json.dumps(video) + "\n" + json.dumps(text) + "\n")
    return str(path)


def _engine(tmp_path_factory, family: str, records: str):
    model_dir = make_tiny_model(str(tmp_path_factory.mktemp(family)), family)
    cfg = resolve_data(
        DataConfig(video_fps=None, video_nframes=4, video_min_pixels=1024, video_max_pixels=4096), model_dir
    )
    ds = RecordDataset(load_records(records), cfg, records)
    processor = AutoProcessor.from_pretrained(model_dir)
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    engine = HFRolloutEngine(model, processor)
    return engine, encode_prompts(processor, [ds[0], ds[1]], ds.cfg, ds.loader)


class Reads:
    """What the vision tower and the language model read, call by call (forward pre-hooks)."""

    def __init__(self, model, family: str):
        self.tower_rows: list[int] = []
        self.lm_tokens: list[int] = []
        tower = get_family(family).vision.tower(model)
        self._hooks = [
            tower.register_forward_pre_hook(self._tower, with_kwargs=True),
            model.model.language_model.register_forward_pre_hook(self._lm, with_kwargs=True),
        ]

    def _tower(self, module, args, kwargs):
        pixels = next(t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor))
        self.tower_rows.append(pixels.shape[0])

    def _lm(self, module, args, kwargs):
        embeds = kwargs.get("inputs_embeds")
        ids = kwargs.get("input_ids") if embeds is None else embeds
        self.lm_tokens.append(ids.shape[0] * ids.shape[1])

    def close(self) -> None:
        for h in self._hooks:
            h.remove()


@pytest.mark.parametrize("family", COUNTED)
def test_a_group_reads_its_video_and_prompt_once(tmp_path_factory, records, family):
    engine, batch = _engine(tmp_path_factory, family, records)
    model = engine.model
    one = expand(batch, [1, 0])
    prompt_len = one["input_ids"].shape[1]
    video_rows = next(one[k].shape[0] for k in ("pixel_values_videos", "pixel_values") if k in one)
    fixed = SamplingConfig(temperature=0, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS)

    reads = Reads(model, family)
    shared = engine.generate(batch, [N, 0], fixed)
    reads.close()
    assert shared.mask.sum(1).tolist() == [NEW_TOKENS] * N
    # the tower once, over one copy of the video; the prompt but its last token once, then each of
    # the n rows' last prompt token (whose logits give the first sampled token), then the
    # generated tokens
    assert reads.tower_rows == [video_rows]
    assert reads.lm_tokens == [prompt_len - 1] + [N] * NEW_TOKENS

    reads = Reads(model, family)  # the unshared path: generate over n copies of the prompt
    with torch.no_grad():
        model.generate(
            **to_device(expand(batch, [N, 0]), "cpu"),
            do_sample=False,
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            eos_token_id=engine.eos_ids,
            pad_token_id=engine.pad_id,
        )
    reads.close()
    assert reads.tower_rows == [N * video_rows]
    assert reads.lm_tokens == [N * prompt_len] + [N] * (NEW_TOKENS - 1)
    print(
        f"\n{family}: prompt {prompt_len} tokens, n={N}: tower rows {N * video_rows} -> {video_rows}; "
        f"language-model prompt tokens {N * prompt_len} -> {prompt_len - 1 + N}"
    )


def _unshared(engine: HFRolloutEngine, batch, repeats: list[int], sampling: SamplingConfig):
    """The engine's responses when its ``model.generate`` runs over the expanded prompts from
    scratch (no prefilled cache, its own positions): the unshared path, everything else equal."""
    generate = engine.model.generate
    shared_inputs = ("input_ids", "attention_mask", "position_ids", "past_key_values")

    def from_scratch(**kwargs):
        rest = {k: v for k, v in kwargs.items() if k not in shared_inputs}
        return generate(**expand(batch, repeats), **rest)

    engine.model.generate = from_scratch
    try:
        return engine.generate(batch, repeats, sampling)
    finally:
        del engine.model.generate


SAMPLINGS = {
    "greedy": SamplingConfig(temperature=0, max_new_tokens=8, return_logprobs=True),
    "every key": dataclasses.replace(SamplingConfig(**CHANGED), max_new_tokens=8),
}


@pytest.mark.parametrize("family", EXACT)
def test_shared_prefill_gives_the_unshared_responses_and_logprobs(tmp_path_factory, records, family):
    engine, batch = _engine(tmp_path_factory, family, records)
    assert batch.inputs["attention_mask"][1].eq(0).any()  # the text prompt is left-padded
    for name, sampling in SAMPLINGS.items():
        for repeats in ([3, 2], [0, 2], [1, 1]):
            torch.manual_seed(7)
            shared = engine.generate(batch, repeats, sampling)
            deltas = getattr(engine.model.model, "rope_deltas", None)  # M-RoPE: left for each row
            torch.manual_seed(7)
            unshared = _unshared(engine, batch, repeats, sampling)
            where = f"{family}, {name}, repeats {repeats}"
            if deltas is not None:
                assert torch.equal(deltas, engine.model.model.rope_deltas), where
            assert torch.equal(shared.ids, unshared.ids) and torch.equal(shared.mask, unshared.mask), where
            assert shared.texts == unshared.texts and shared.truncated == unshared.truncated, where
            torch.testing.assert_close(shared.logprobs, unshared.logprobs, atol=1e-5, rtol=0, msg=where)


class RecordingLLM:
    """Stands in for ``vllm.LLM``: keeps its arguments and what each ``generate`` is handed, and
    answers every request with ``params.n`` completions (no engine is started)."""

    def __init__(self, **kwargs):
        self.kwargs, self.calls = kwargs, []
        self.llm_engine = SimpleNamespace(model_config=SimpleNamespace(dtype=torch.float32))

    def generate(self, prompts, params, use_tqdm=False, lora_request=None):
        self.calls.append((prompts, params))
        return [
            SimpleNamespace(
                outputs=[SimpleNamespace(index=i, token_ids=[100 * r + i], logprobs=None) for i in range(p.n)]
            )
            for r, p in enumerate(params)
        ]


def test_vllm_gets_a_group_as_one_request(monkeypatch, tmp_path_factory, records):
    """The training engine hands ``LLM.generate`` one request per prompt: ``n`` completions when
    sampled (their seeds one request's), one completion repeated when greedy; prefix caching on."""
    vllm = pytest.importorskip("vllm")
    from easyvideor1.rollout.base import Prompt, Request
    from easyvideor1.rollout.vllm import VLLMRolloutEngine

    hf_engine, batch = _engine(tmp_path_factory, "qwen3_vl", records)
    monkeypatch.setattr(vllm, "LLM", RecordingLLM)
    engine = VLLMRolloutEngine(hf_engine.model.name_or_path, hf_engine.processor)
    assert engine.llm.kwargs["enable_prefix_caching"] is True  # the children share the prompt's blocks
    batch.texts, batch.media = [batch.texts[0]] * 3, [batch.media[0]] * 3  # three prompts: one unused
    batch.video_counts, batch.image_counts = [1] * 3, [0] * 3
    prompts = engine.batch_prompts(batch)

    sampled = engine.generate(batch, [3, 0, 2], SamplingConfig(max_new_tokens=4))
    sent, params = engine.llm.calls[-1]
    assert sent == [prompts[0], prompts[2]] and [p.n for p in params] == [3, 2]
    assert len({p.seed for p in params}) == 2 and None not in {p.seed for p in params}
    assert sampled.ids[:, 0].tolist() == [0, 1, 2, 100, 101]  # completions in index order, per prompt

    greedy = engine.generate(batch, [3, 0, 2], SamplingConfig(temperature=0, max_new_tokens=4))
    sent, params = engine.llm.calls[-1]
    assert sent == [prompts[0], prompts[2]] and [p.n for p in params] == [1, 1]
    assert greedy.ids[:, 0].tolist() == [0, 0, 0, 100, 100]

    request = Request("seeded", Prompt(batch.texts[0], raw=batch.media[0]), SamplingConfig(), n=4, seed=11)
    (out,) = engine.run_batch([request])
    (sent,), (params,) = engine.llm.calls[-1]
    assert params.n == 4 and params.seed == 11 and len(out.texts) == 4  # vLLM seeds child i with 11 + i


@pytest.mark.slow
def test_vllm_children_prefill_the_prompt_once_through_prefix_caching(tmp_path_factory, records):
    """vLLM forks a request's ``n`` completions into ``n`` child requests: with prefix caching (on
    by default) the first child computes the prompt and the others read its KV blocks (each
    recomputes only the tokens after its last full block); without it every child prefills the
    whole prompt. The vision tower runs once either way (vLLM's encoder cache)."""
    pytest.importorskip("vllm")
    model_dir = make_tiny_model(str(tmp_path_factory.mktemp("vllm_sharing")), "qwen3_vl")
    out = tmp_path_factory.mktemp("report") / "report.json"
    worker = Path(__file__).with_name("vllm_sharing_worker.py")
    report = run_worker(worker, out, model_dir, records, str(out))
    P, n, block = report["prompt_tokens"], report["n"], report["block"]
    cached = (P - 1) // block * block  # full blocks, the last token always recomputed
    assert cached > 0
    shared = report["sampled, prefix caching on"]
    assert shared["requests"] == n and shared["distinct_rows"] == n
    assert shared["vllm:prompt_tokens_cached"] == (n - 1) * cached
    assert shared["computed"] == P + (n - 1) * (P - cached)
    unshared = report["sampled, prefix caching off"]
    assert unshared["computed"] == n * P and unshared["vllm:prompt_tokens_cached"] == 0
    for greedy in (report["greedy, prefix caching on"], report["greedy, prefix caching off"]):
        assert greedy["requests"] == 1 and greedy["computed"] == P and greedy["rows"] == n
    assert all(v["tower_calls"] == 1 for k, v in report.items() if isinstance(v, dict))
    print(f"\nvLLM, prompt {P} tokens, n={n}: computed {shared['computed']:.0f} (caching on), {n * P} (off)")
