"""Peak memory and optimizer state of one training step: full fine-tuning vs LoRA (issue 14).

The same random-weight Qwen3-VL (the real architecture, sizes from the arguments; the default is
~110 M parameters, ~420 MB in fp32, with real per-head proportions) takes one training step
(forward, backward, AdamW step) on the same batch of random tokens, twice: every weight trainable, then rank-8 LoRA
(alpha 16) on every linear layer of the language model with the base frozen, as ``model.lora``
does by default. Each variant runs in its own process so that its peak is its own; the table puts
them side by side with the ratios.

Measured per variant: trainable parameters; gradient bytes and AdamW state bytes (summed over the
tensors the optimizer holds after the step: exact); peak memory of the step above the memory held
before it (the model and batch): ``torch.cuda.max_memory_allocated`` on a GPU, else the peak
resident set size (Linux ``VmHWM``, reset through ``/proc/self/clear_refs`` before the step). A KL
reference costs full fine-tuning a frozen copy of the weights, and LoRA nothing (the adapter is
disabled instead): the "with KL reference" row adds that copy's bytes to the full run's peak.

Usage: python benchmarks/lora_memory.py [--hidden 1024 --layers 6 --intermediate 3072 --heads 8
       --kv-heads 4 --vocab 16384 --batch 2 --seq 128 --rank 8 --dtype float32] [--smoke]
(the figures end with one JSON line)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def build_model(a: argparse.Namespace):
    """The Qwen3-VL of the arguments' sizes (the tiny model's vision tower and special tokens)."""
    import torch
    from transformers import AutoModelForImageTextToText

    from easyvideor1.models.families import QWEN_SPECIAL_TOKENS
    from easyvideor1.models.tiny import build_tokenizer, tiny_config

    tok = build_tokenizer()
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS}
    cfg = tiny_config("qwen3_vl", a.vocab, ids, hidden=a.hidden, layers=a.layers)
    text = cfg.text_config
    text.intermediate_size, text.num_attention_heads = a.intermediate, a.heads
    text.num_key_value_heads, text.head_dim = a.kv_heads, a.hidden // a.heads
    # M-RoPE's (temporal, height, width) split of the rotary half-dimension, Qwen3-VL's 24/20/20
    # proportions (the tiny config's [6, 5, 5] only fits 32-dimensional heads)
    half = text.head_dim // 2
    hw = half * 20 // 64
    text.rope_parameters = {**text.rope_parameters, "mrope_section": [half - 2 * hw, hw, hw]}
    torch.manual_seed(0)
    return AutoModelForImageTextToText.from_config(cfg, dtype=getattr(torch, a.dtype))


def lora_targets(model) -> list[str]:
    """Every linear layer of the language model (``model.lora``'s default; not the LM head)."""
    import torch

    return [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and ".language_model." in n]


def _rss_peak_reset() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # resets VmHWM (peak RSS) to the current RSS
        return True
    except OSError:
        return False


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def run_variant(variant: str, a: argparse.Namespace) -> dict:
    """One training step of ``variant`` (``full`` or ``lora``); its figures as a dict."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":  # one thread, timed by its CPU time: a shared machine's wall clock is noise
        torch.set_num_threads(1)
    model = build_model(a).to(device)
    if variant == "lora":
        from peft import LoraConfig, get_peft_model

        cfg = LoraConfig(
            r=a.rank, lora_alpha=2 * a.rank, lora_dropout=0.0, target_modules=lora_targets(model)
        )
        model = get_peft_model(model, cfg).get_base_model()  # adapters inside, base frozen
    model.train()
    total = sum(p.numel() for p in model.parameters())  # adapters included
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=1e-5)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(600, a.vocab, (a.batch, a.seq), generator=gen).to(device)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    else:
        reset = _rss_peak_reset()
        before = _status_kib("VmRSS") * 1024

    def step() -> float:
        opt.zero_grad(set_to_none=False)  # gradients stay allocated, as between real steps
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return float(loss)

    loss = step()  # the first step: its peak includes allocating gradients and AdamW state
    if device == "cuda":
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - before
    else:
        peak = _status_kib("VmHWM") * 1024 - before if reset else float("nan")
    clock = time.perf_counter if device == "cuda" else time.process_time
    t = clock()
    step()  # timed: a steady-state step
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = clock() - t
    grad_bytes = sum(p.grad.numel() * p.grad.element_size() for p in trainable if p.grad is not None)
    state_bytes = sum(
        v.numel() * v.element_size() for s in opt.state.values() for v in s.values() if torch.is_tensor(v)
    )
    return {
        "variant": variant,
        "device": device,
        "params": total,
        "trainable": sum(p.numel() for p in trainable),
        "weight_bytes": weight_bytes,
        "grad_bytes": grad_bytes,
        "optimizer_state_bytes": state_bytes,
        "peak_step_bytes": peak,
        "step_seconds": seconds,
        "loss": loss,
    }


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--intermediate", type=int, default=3072)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--vocab", type=int, default=16384)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--variant", choices=["full", "lora"], help=argparse.SUPPRESS)
    p.add_argument(
        "--smoke", action="store_true", help="tiny sizes (seconds): checks it runs, not its figures"
    )
    argv = list(argv if argv is not None else sys.argv[1:])
    a = p.parse_args(argv)
    # a few-MiB model: the smoke sizes first, so sizes given on the command line still win
    return p.parse_args(SMOKE_SIZES + argv) if a.smoke else a


# --smoke: a small Qwen3-VL (its figures checked exactly by tests/benchmarks/test_smoke.py)
SMOKE_SIZES = ["--hidden", "256", "--layers", "2", "--intermediate", "512", "--heads", "4", "--kv-heads", "2"]
SMOKE_SIZES += ["--vocab", "4096", "--seq", "32", "--rank", "4"]
# the JSON line's keys, full and --smoke (tests/benchmarks/test_smoke.py checks them)
RESULT_KEYS = ("lora_trainable_fraction", "optimizer_state_ratio", "step_peak_ratio", "full", "lora")


def main(argv: list[str] | None = None) -> dict:
    a = _args(argv)
    if a.variant:
        print(json.dumps(run_variant(a.variant, a)))
        return {}
    passed = list(argv if argv is not None else sys.argv[1:])
    rows = {}
    for variant in ("full", "lora"):
        r = subprocess.run(
            [sys.executable, __file__, *passed, "--variant", variant], capture_output=True, text=True
        )
        if r.returncode:
            raise RuntimeError(f"variant {variant!r} failed:\n{r.stderr[-3000:]}")
        rows[variant] = json.loads(r.stdout.strip().splitlines()[-1])
    full, lora = rows["full"], rows["lora"]
    mib = 2**20
    memory = "CUDA max_memory_allocated" if full["device"] == "cuda" else "peak RSS (VmHWM)"
    print(
        f"Qwen3-VL {full['params'] / 1e6:.1f} M parameters ({full['weight_bytes'] / mib:.0f} MiB, {a.dtype}), "
        f"hidden {a.hidden}, {a.layers} layers; batch {a.batch} x {a.seq} tokens; LoRA rank {a.rank} on "
        f"every language-model linear layer; one step = forward + backward + AdamW; peak: {memory} "
        f"above the model and batch"
    )
    print(f"{'':<28}{'full FT':>12}{'LoRA':>12}{'full / LoRA':>14}")

    def line(label: str, f: float, lo: float, fmt: str = "{:>12.1f}") -> None:
        ratio = f / lo if lo else float("inf")
        print(f"{label:<28}" + fmt.format(f) + fmt.format(lo) + f"{ratio:>13.1f}x")

    line("trainable parameters (M)", full["trainable"] / 1e6, lora["trainable"] / 1e6, "{:>12.3f}")
    line("gradients (MiB)", full["grad_bytes"] / mib, lora["grad_bytes"] / mib)
    line("AdamW state (MiB)", full["optimizer_state_bytes"] / mib, lora["optimizer_state_bytes"] / mib)
    line("step peak (MiB)", full["peak_step_bytes"] / mib, lora["peak_step_bytes"] / mib)
    held = {k: (r["weight_bytes"] + r["peak_step_bytes"]) / mib for k, r in rows.items()}
    line("weights + step peak (MiB)", held["full"], held["lora"])
    # the KL reference: a frozen copy for full fine-tuning, the adapter switched off for LoRA
    line("  + KL reference (MiB)", held["full"] + full["weight_bytes"] / mib, held["lora"])
    clock = "GPU wall" if full["device"] == "cuda" else "1-thread CPU"
    line(f"2nd step time (s, {clock})", full["step_seconds"], lora["step_seconds"], "{:>12.2f}")
    result = {
        "lora_trainable_fraction": lora["trainable"] / lora["params"],
        "optimizer_state_ratio": full["optimizer_state_bytes"] / max(lora["optimizer_state_bytes"], 1),
        "step_peak_ratio": full["peak_step_bytes"] / max(lora["peak_step_bytes"], 1),
        "full": full,
        "lora": lora,
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
