"""Per-rank peak memory of one long-video sample's forward + backward, sequence parallelism 1 vs 2.

One small Qwen3-VL (the tiny vision tower, a 512-wide 4-layer language model) and one video
prompt of several thousand tokens (random frames, 256x256, the frame count sets the length) with a
response of 8 sentences: the trainer's forward (``response_logprobs``: the response tokens' log-probs
and entropy) and the backward of a loss on them, in fp32 on the CPU, with the sequence split over 1 process or 2 torchrun ranks (gloo). Each process measures
its peak resident memory above the level before the forward (Linux ``VmHWM``, reset through
``/proc/self/clear_refs``) and the time its vision tower took. Printed: ``sp2_vs_sp1_peak_ratio``
(SP 1's peak / SP 2's largest per-rank peak) at the longest length, the peaks at every length,
the longest of those lengths that fits under ``--cap-mib`` with each, and
``tower_s_sp1`` / ``tower_s_sp2`` (per-rank vision tower seconds: each SP 2 rank encodes half the
frames).

``attn_peak_ratio``: the Ulysses attention alone (what runs after the exchange, every head's whole
sequence) on a packed row of two sequences of ``--attn-tokens`` tokens in all (16,384; 2,048 with
``--smoke``), forward and backward, each variant in a fresh process: the previous implementation's
peak (a dense ``[B, 1, S, S]`` mask in every layer) over the current one's (the causal kernel on
each sequence's stretch), both above the level before the call.
Usage: python benchmarks/sequence_parallel.py [--frames 64,128,256] [--cap-mib 1280] [--hidden 512] [--layers 4]
       [--attn-tokens 16384] [--attention-only] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's package, not an installed copy

RESULT_KEYS = (
    "sp2_vs_sp1_peak_ratio",
    "tokens",
    "peak_mib_sp1",
    "peak_mib_sp2",
    "cap_mib",
    "longest_tokens_under_cap_sp1",
    "longest_tokens_under_cap_sp2",
    "tower_s_sp1",
    "tower_s_sp2",
    "attn_tokens",
    "attn_peak_mib_previous",
    "attn_peak_mib_spans",
    "attn_peak_ratio",
)


def _hwm_mib() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


def _rss_mib() -> float:
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def worker(model_dir: str, frames: int, out: str) -> None:
    """One forward + backward (this process's share under torchrun); writes its figures to ``out``."""
    import numpy as np
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from easyvideor1.models import sequence_parallel as sp_module
    from easyvideor1.models.logprobs import response_logprobs

    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    model = AutoModelForImageTextToText.from_pretrained(
        model_dir, dtype=torch.float32, attn_implementation="sdpa"
    )
    processor = AutoProcessor.from_pretrained(model_dir)
    tower = sp_module._vision_tower(model)
    tower_s = [0.0]
    encode = tower.forward

    def timed(*args, **kwargs):
        t0 = time.perf_counter()
        out = encode(*args, **kwargs)
        tower_s[0] += time.perf_counter() - t0
        return out

    tower.forward = timed  # this rank's own encoding (under SP, inside the frame split and gather)
    if world > 1:
        dist.init_process_group("gloo")
        sp_module.enable(model, sp_module.SPGroup(dist.group.WORLD, world, rank))
    video = np.random.default_rng(0).integers(0, 255, size=(frames, 256, 256, 3), dtype=np.uint8)
    chat = [{"role": "user", "content": [{"type": "video"}, {"type": "text", "text": "What happens?"}]}]
    text = processor.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    inputs = processor(
        text=[text],
        videos=[video],
        return_tensors="pt",
        videos_kwargs={
            "do_sample_frames": False,
            "video_metadata": [
                {"fps": 2.0, "total_num_frames": frames, "frames_indices": list(range(frames))}
            ],
        },
    )
    response = processor.tokenizer(
        "It moves to the left, then stops. " * 8, add_special_tokens=False, return_tensors="pt"
    )
    response_ids = response["input_ids"]
    response_mask = torch.ones_like(response_ids)
    tokens = int(inputs["input_ids"].shape[1]) + int(response_ids.shape[1])
    model.train()
    with open("/proc/self/clear_refs", "w") as f:  # the peak starts again from here
        f.write("5")
    before = _rss_mib()
    # the trainer's path: log-probs and entropy of the response tokens (on shards under SP)
    logp, entropy = response_logprobs(model, dict(inputs), response_ids, response_mask)
    loss = -(logp * response_mask).sum() / response_mask.sum() - 0.01 * entropy.mean()
    loss.backward()
    peak = _hwm_mib() - before
    if rank == 0:
        Path(out).write_text(json.dumps({"tokens": tokens, "tower_s": tower_s[0], "peaks": []}))
    if world > 1:  # every rank's peak
        peaks: list = [None] * world
        dist.all_gather_object(peaks, peak)
        dist.destroy_process_group()
    else:
        peaks = [peak]
    if rank == 0:
        row = json.loads(Path(out).read_text())
        row["peaks"] = peaks
        Path(out).write_text(json.dumps(row))


def attention_worker(variant: str, tokens: int, out: str) -> None:
    """One Ulysses attention forward + backward over a packed row of two sequences (2 heads of 64
    channels: a rank's share of the heads after the exchange); writes its peak to ``out``.
    ``previous``: the dense mask the attention built for every padded or packed row before
    (kept in the module for the layouts nothing else expresses); ``spans``: the causal kernel on
    each sequence's stretch, as it runs now."""
    import torch
    import torch.nn.functional as F

    from easyvideor1.models import sequence_parallel as sp_module

    torch.set_num_threads(1)
    torch.manual_seed(0)
    key_valid = torch.ones(1, tokens, dtype=torch.bool)
    segments = (torch.arange(tokens) >= tokens // 2).long()[None] + 1
    q, k, v = (torch.randn(1, 2, tokens, 64, requires_grad=True) for _ in range(3))
    with open("/proc/self/clear_refs", "w") as f:  # the peak starts again from here
        f.write("5")
    before = _rss_mib()
    if variant == "previous":
        layout = sp_module._Layout(sp_module.SPGroup(None, 1, 0), key_valid, segments)
        mask = sp_module._mask(layout, tokens, q.device)
        attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    else:
        attended = sp_module.span_attention(q, k, v, sp_module.causal_spans(key_valid, segments))
    attended.square().sum().backward()
    Path(out).write_text(json.dumps({"peak": _hwm_mib() - before}))


def measure_attention(variant: str, tokens: int, tmp: str) -> float:
    out = os.path.join(tmp, f"attn_{variant}_{tokens}.json")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    me = [str(Path(__file__).resolve()), "--attn-worker", variant, str(tokens), out]
    r = subprocess.run([sys.executable, *me], capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"attention worker failed ({variant}, {tokens} tokens):\n{r.stderr[-3000:]}")
    return json.loads(Path(out).read_text())["peak"]


def attention_figures(tokens: int, tmp: str) -> dict:
    """The attention's peaks, previous and current, side by side (each in a fresh process)."""
    previous, spans = (measure_attention(v, tokens, tmp) for v in ("previous", "spans"))
    return {
        "attn_tokens": tokens,
        "attn_peak_mib_previous": round(previous, 1),
        "attn_peak_mib_spans": round(spans, 1),
        "attn_peak_ratio": previous / max(spans, 0.1),
    }


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(model_dir: str, frames: int, ranks: int, tmp: str) -> dict:
    out = os.path.join(tmp, f"sp{ranks}_{frames}.json")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    me = [str(Path(__file__).resolve()), "--worker", model_dir, str(frames), out]
    if ranks == 1:
        command = [sys.executable, *me]
    else:
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc-per-node={ranks}",
            "--master-addr=127.0.0.1",
            f"--master-port={_port()}",
            *me,
        ]
    r = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"worker failed ({ranks} rank(s), {frames} frames):\n{r.stderr[-3000:]}")
    return json.loads(Path(out).read_text())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", default="64,128,256", help="frame counts (each 2 frames: 64 tokens)")
    p.add_argument("--cap-mib", type=float, default=1280.0)
    p.add_argument("--hidden", type=int, default=512, help="the language model's hidden size")
    p.add_argument("--layers", type=int, default=4, help="the language model's decoder layers")
    p.add_argument("--attn-tokens", type=int, default=16384, help="the attention part's length")
    p.add_argument("--attention-only", action="store_true", help="the attention part only (its keys)")
    p.add_argument("--smoke", action="store_true", help="8 frames and 2,048 attention tokens, the same keys")
    p.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    p.add_argument("--attn-worker", nargs=3, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        worker(a.worker[0], int(a.worker[1]), a.worker[2])
        return
    if a.attn_worker:
        attention_worker(a.attn_worker[0], int(a.attn_worker[1]), a.attn_worker[2])
        return
    from easyvideor1.models.tiny import make_tiny_model

    attn_tokens = 2048 if a.smoke else a.attn_tokens
    if a.attention_only:
        with tempfile.TemporaryDirectory() as tmp:
            attn = attention_figures(attn_tokens, tmp)
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in attn.items()}))
        return
    lengths = [8] if a.smoke else [int(x) for x in a.frames.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = make_tiny_model(os.path.join(tmp, "model"), "qwen3_vl", hidden=a.hidden, layers=a.layers)
        one = {n: measure(model_dir, n, 1, tmp) for n in lengths}
        two = {n: measure(model_dir, n, 2, tmp) for n in lengths}
        attn = attention_figures(attn_tokens, tmp)
    longest = lengths[-1]
    peak1 = {one[n]["tokens"]: round(max(one[n]["peaks"]), 1) for n in lengths}
    peak2 = {two[n]["tokens"]: round(max(two[n]["peaks"]), 1) for n in lengths}
    tokens = one[longest]["tokens"]

    def fits(peaks: dict) -> int:
        return max((t for t, mib in peaks.items() if mib <= a.cap_mib), default=0)

    out = {
        "sp2_vs_sp1_peak_ratio": peak1[tokens] / peak2[tokens],
        "tokens": tokens,
        "peak_mib_sp1": peak1,
        "peak_mib_sp2": peak2,
        "cap_mib": a.cap_mib,
        "longest_tokens_under_cap_sp1": fits(peak1),
        "longest_tokens_under_cap_sp2": fits(peak2),
        "tower_s_sp1": one[longest]["tower_s"],
        "tower_s_sp2": two[longest]["tower_s"],
        **attn,
    }
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}))


if __name__ == "__main__":
    main()
