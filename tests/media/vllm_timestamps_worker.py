"""Render one variable-frame-rate video prompt through vLLM and the HF processor, in both modes.

Run by ``test_timestamps_vllm.py`` in its own process (importing vLLM changes process state).
Usage: python vllm_timestamps_worker.py WORKDIR; prints a JSON object
``{mode: {"vllm": [...], "hf": [...], "indices": [...]}}`` with the ``<t seconds>`` values.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

_SECONDS = re.compile(r"<([\d.]+) seconds>")


def main(work: str) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"{cpus[0]}-{cpus[-1]}")
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from transformers import AutoProcessor
    from vllm import LLM, SamplingParams

    from easyvideor1.data.config import DataConfig
    from easyvideor1.data.dataset import RecordDataset, encode_sample, prompt_parts
    from easyvideor1.data.records import load_records
    from easyvideor1.models.tiny import make_tiny_model
    from easyvideor1.rollout.vllm import vllm_prompt

    d = Path(work)
    model = make_tiny_model(str(d / "model"), "qwen3vl")
    processor = AutoProcessor.from_pretrained(model)
    llm = LLM(
        model=model,
        dtype="float32",
        max_model_len=2048,
        enforce_eager=True,
        distributed_executor_backend="uni",
        limit_mm_per_prompt={"video": 1},
    )
    data = str(d / "data.jsonl")
    report = {}
    for mode in ("index", "pts"):
        cfg = DataConfig(
            model_family="qwen3vl",
            video_fps=2.0,
            video_min_pixels=4 * 32 * 32,
            video_max_pixels=16 * 32 * 32,
            cache_mode="decode_only",
            timestamps=mode,
        )
        ds = RecordDataset(load_records(data), cfg, data)
        text, media = prompt_parts(processor, ds[0], cfg, ds.loader)
        out = llm.generate([vllm_prompt(text, media)], SamplingParams(max_tokens=1))
        hf_ids = encode_sample(processor, ds[0], cfg, ds.loader)["input_ids"][0].tolist()
        report[mode] = {
            "vllm": _SECONDS.findall(processor.tokenizer.decode(out[0].prompt_token_ids)),
            "hf": _SECONDS.findall(processor.tokenizer.decode(hf_ids)),
            "indices": media["video"][0][1]["frames_indices"],
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1])
