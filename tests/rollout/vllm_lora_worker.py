"""One process: a LoRA update, the merged push to an in-process vLLM engine, and HF greedy on the
merged checkpoint; writes the measurements as JSON for ``test_vllm_lora.py``.

Usage: python vllm_lora_worker.py MODEL_DIR DATA_FILE OUT_DIR

The policy is the tiny Qwen3-VL with rank-8 LoRA on every language-model linear layer, trained for
real (AdamW on the adapters only, a few steps towards a fixed answer) inside the trainer's
``EngineHandoff``, whose exit pushes ``merged_state_dict`` to vLLM. The reference is the merged
model that peft writes (``merge_and_unload().save_pretrained``), loaded back by transformers.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def _cpu_env() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"{cpus[0]}-{cpus[-1]}")


def main(model_dir: str, data_file: str, out_dir: str) -> None:
    _cpu_env()
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from easyvideor1.data.config import DataConfig
    from easyvideor1.data.dataset import RecordDataset, encode_prompts
    from easyvideor1.data.records import load_records
    from easyvideor1.models.inputs import expand
    from easyvideor1.models.logprobs import response_logprobs
    from easyvideor1.models.lora import attach_lora, peft_of
    from easyvideor1.models.vision import DummyVisionPass
    from easyvideor1.rollout.base import SamplingConfig
    from easyvideor1.rollout.hf import HFRolloutEngine
    from easyvideor1.rollout.vllm import VLLMRolloutEngine
    from easyvideor1.trainer.config import LoraConfig
    from easyvideor1.trainer.rollout_engines import EngineHandoff

    report: dict = {}
    cfg = DataConfig(
        model_family="qwen3vl", video_nframes=4, video_fps=None, video_min_pixels=1024, video_max_pixels=4096
    )
    ds = RecordDataset(load_records(data_file), cfg, data_file)
    samples = [ds[i] for i in range(min(len(ds), 6))]
    processor = AutoProcessor.from_pretrained(model_dir)
    batch = encode_prompts(processor, samples, cfg, ds.loader)
    greedy = SamplingConfig(temperature=0, max_new_tokens=24)
    B = len(batch)

    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32)
    report["base_texts"] = HFRolloutEngine(model.eval(), processor).generate(batch, [1] * B, greedy).texts
    torch.manual_seed(0)
    # the trainer's own LoRA: the transformers model with adapters inside (peft's get_peft_model)
    policy = attach_lora(model, LoraConfig(rank=8, alpha=16, dropout=0.05, target_modules=TARGETS))
    wrapper = peft_of(policy)
    trainable = [p for p in policy.parameters() if p.requires_grad]
    report["trainable"] = sum(p.numel() for p in trainable)
    report["total"] = sum(p.numel() for p in policy.parameters())

    engine = VLLMRolloutEngine(
        model_dir, processor, dtype="float32", seed=0, max_model_len=2048, enforce_eager=True
    )
    # a real LoRA update, inside the trainer's handoff: its exit pushes the merged weights
    tok = processor.tokenizer
    target = tok("<answer>B</answer>", add_special_tokens=False)["input_ids"] + [
        tok.convert_tokens_to_ids("<|im_end|>")
    ]
    ids = torch.tensor([target] * B)
    mask = torch.ones_like(ids)
    opt = torch.optim.AdamW(trainable, lr=1e-3)
    dummy = DummyVisionPass(policy)
    policy.train()
    t = time.perf_counter()
    with EngineHandoff(engine, policy):
        for _ in range(3):
            logp, _ = response_logprobs(policy, expand(batch, [1] * B), ids, mask, engine.banned, 1.0, dummy)
            loss = -(logp * mask).sum() / mask.sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
    report["update_and_push_seconds"] = time.perf_counter() - t
    policy.eval()
    out = engine.generate(batch, [1] * B, greedy)
    report["vllm_texts"], report["vllm_ids"] = out.texts, out.ids.tolist()
    # the engine's sampled-token log-probs against the trainer's (adapters unmerged) forward
    sampled = engine.generate(
        batch, [2] * B, SamplingConfig(temperature=1.0, max_new_tokens=16, return_logprobs=True)
    )
    with torch.no_grad():
        hf_lp, _ = response_logprobs(policy, expand(batch, [2] * B), sampled.ids, sampled.mask, engine.banned)
    m = sampled.mask.bool()
    report["logprob_gap_max"] = float((sampled.logprobs[m] - hf_lp[m]).abs().max())
    engine.close()

    # adapter-only sync: vLLM's LoRA on the base weights, the same update's adapter sent as files
    engine = VLLMRolloutEngine(
        model_dir, processor, dtype="float32", seed=0, max_model_len=2048, enforce_eager=True, max_lora_rank=8
    )
    handoff = EngineHandoff(engine, policy)
    report["adapter_before_push_texts"] = engine.generate(batch, [1] * B, greedy).texts
    t = time.perf_counter()
    handoff.push()
    report["adapter_push_seconds"] = time.perf_counter() - t
    report["adapter_files"] = sorted(os.listdir(handoff._adapter_dir))
    out = engine.generate(batch, [1] * B, greedy)
    report["adapter_texts"], report["adapter_ids"] = out.texts, out.ids.tolist()
    sampled = engine.generate(
        batch, [2] * B, SamplingConfig(temperature=1.0, max_new_tokens=16, return_logprobs=True)
    )
    with torch.no_grad():
        hf_lp, _ = response_logprobs(policy, expand(batch, [2] * B), sampled.ids, sampled.mask, engine.banned)
    m = sampled.mask.bool()
    report["adapter_logprob_gap_max"] = float((sampled.logprobs[m] - hf_lp[m]).abs().max())
    handoff.push()  # a second push replaces the adapter (new id, old one dropped)
    report["adapter_loras_after_second_push"] = sorted(engine.llm.llm_engine.list_loras())
    report["adapter_second_texts"] = engine.generate(batch, [1] * B, greedy).texts
    handoff.close()
    engine.close()

    merged_dir = os.path.join(out_dir, "merged")
    copy.deepcopy(wrapper).merge_and_unload().save_pretrained(merged_dir)
    processor.save_pretrained(merged_dir)
    merged = AutoModelForImageTextToText.from_pretrained(merged_dir, dtype=torch.float32).eval()
    hf = HFRolloutEngine(merged, processor).generate(batch, [1] * B, greedy)
    report["hf_merged_texts"], report["hf_merged_ids"] = hf.texts, hf.ids.tolist()
    with open(os.path.join(out_dir, "report.json"), "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)


if __name__ == "__main__":
    main(*sys.argv[1:4])
