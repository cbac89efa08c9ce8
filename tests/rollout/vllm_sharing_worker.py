"""What vLLM computes for one group (one video prompt, n = 4) from the training engine's request,
read from vLLM's own counters and a hook on its vision tower: prompt tokens computed and served
from the prefix cache, child requests, vision-tower calls. Writes a JSON report for
``test_prompt_sharing.py``.

    python vllm_sharing_worker.py MODEL DATA OUT
"""

from __future__ import annotations

import json
import sys

from vllm_worker import _cpu_env  # same directory (run as a script)

BLOCK = 32  # the CPU backend's smallest KV block; its default (128) is longer than the tiny prompt
N = 4


def _counters(llm) -> dict[str, float]:
    values = {}
    for m in llm.get_metrics():
        if m.name in ("vllm:prompt_tokens", "vllm:prompt_tokens_cached"):
            values[m.name] = m.value
        elif m.name == "vllm:request_prefill_kv_computed_tokens":
            values["requests"], values["computed"] = m.count, m.sum
    return values


def main(model_dir: str, data_file: str, out_path: str) -> None:
    _cpu_env()
    from transformers import AutoProcessor

    from easyvideor1.data.config import DataConfig
    from easyvideor1.data.dataset import RecordDataset, encode_prompts
    from easyvideor1.data.records import load_records
    from easyvideor1.rollout.base import SamplingConfig
    from easyvideor1.rollout.vllm import VLLMRolloutEngine

    cfg = DataConfig(
        model_family="qwen3vl", video_nframes=4, video_fps=None, video_min_pixels=1024, video_max_pixels=4096
    )
    ds = RecordDataset(load_records(data_file), cfg, data_file)
    processor = AutoProcessor.from_pretrained(model_dir)
    batch = encode_prompts(processor, [ds[0]], cfg, ds.loader)
    report: dict = {"prompt_tokens": int(batch.inputs["attention_mask"].sum()), "block": BLOCK, "n": N}
    tower_calls: list[int] = []  # one entry per vision-tower forward, of either engine
    for caching in (True, False):
        engine = VLLMRolloutEngine(
            model_dir,
            processor,
            dtype="float32",
            max_model_len=2048,
            enforce_eager=True,
            enable_prefix_caching=caching,
            engine_kwargs={"disable_log_stats": False, "block_size": BLOCK},
        )
        runner = engine.llm.llm_engine.model_executor.driver_worker.worker.model_runner
        runner.model.visual.register_forward_hook(lambda *_: tower_calls.append(1))
        for name, sampling in (
            ("sampled", SamplingConfig(temperature=1.0, max_new_tokens=4)),
            ("greedy", SamplingConfig(temperature=0, max_new_tokens=4)),
        ):
            engine.llm.reset_prefix_cache()  # nothing cached from the previous group
            engine.llm.llm_engine.reset_encoder_cache()
            engine.llm.llm_engine.reset_mm_cache()
            before, calls = _counters(engine.llm), len(tower_calls)
            out = engine.generate(batch, [N], sampling)
            after = _counters(engine.llm)
            report[f"{name}, prefix caching {'on' if caching else 'off'}"] = {
                **{k: after[k] - before.get(k, 0) for k in after},
                "tower_calls": len(tower_calls) - calls,
                "rows": len(out.texts),
                "distinct_rows": len({tuple(r) for r in out.ids.tolist()}),
            }
        engine.close()
    with open(out_path, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main(*sys.argv[1:4])
