"""Peak memory of the response tokens' log-probs and entropy: the previous plain formula vs the
chunked one (``models.chunked_logits``), at one long response (issue item 4).

A random hidden state ``[T, H]`` (requires grad) times a fixed LM head ``[H, V]`` gives the logits
in bfloat16 (the model's training dtype; the hidden width is tiny, only the vocabulary matters).
From them each implementation computes the log-probs of T sampled ids and the entropy, with five
banned ids (as the trainer passes the vision placeholders), then a loss on the log-probs runs
backward to the hidden state; the entropy is kept to the end as the logged metric (the trainer
logs it after the backward). Each implementation runs in its own fresh process so that its peak is
its own: the peak resident memory above the level just before the forward (Linux ``VmHWM``, reset
through ``/proc/self/clear_refs``), and the seconds of forward + backward.

``previous_token_logprobs`` below is the implementation the trainer used before, kept here for
comparison, with its callers' division of the logits by the temperature.

Printed: ``peak_ratio`` (previous peak / chunked peak), ``max_abs_diff`` (the largest difference
between the two implementations' log-probs and entropies), the peaks in MiB, T, V and the seconds.
Usage: python benchmarks/logprob_memory.py [--tokens 4096] [--vocab 151936] [--hidden 16] [--smoke]
(``--smoke``: 256 tokens, the same keys; the full mode's previous path needs ~16 GB of memory)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's package, not an installed copy

RESULT_KEYS = (
    "peak_ratio",
    "max_abs_diff",
    "peak_mib_previous",
    "peak_mib_chunked",
    "tokens",
    "vocab",
    "seconds_previous",
    "seconds_chunked",
)
TEMPERATURE = 1.0  # the rollout default; the previous callers divided even then (a copy)


def previous_token_logprobs(logits, ids, banned=None, mask=None):
    """The previous implementation of ``models.logprobs.token_logprobs``, kept for comparison."""
    import torch

    logits = logits.float()
    if banned:
        logits = logits.index_fill(-1, torch.tensor(banned, device=logits.device), float("-inf"))
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    p = logp_all.exp()
    # 0 * -inf is NaN: mask the banned entries out of the entropy sum explicitly
    entropy = -torch.where(p > 0, p * logp_all, torch.zeros_like(p)).sum(-1)
    if mask is not None:
        logp = torch.where(mask.bool(), logp, torch.zeros_like(logp))
    return logp, entropy


def _status_mib(field: str) -> float:
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def worker(implementation: str, tokens: int, vocab: int, hidden: int, out: str) -> None:
    """One forward + backward with ``implementation``; its values and figures go to ``out``."""
    import torch

    from easyvideor1.models.logprobs import token_logprobs

    gen = torch.Generator().manual_seed(0)
    hidden_state = torch.randn(tokens, hidden, generator=gen).bfloat16().requires_grad_(True)
    head = (torch.randn(hidden, vocab, generator=gen) / hidden**0.5).bfloat16()
    banned = list(range(vocab - 5, vocab))  # Qwen's vision placeholders sit at the vocabulary's end
    ids = torch.randint(0, vocab - 5, (1, tokens), generator=gen)
    mask = torch.ones(1, tokens)
    with open("/proc/self/clear_refs", "w") as f:  # the peak starts again from here
        f.write("5")
    before = _status_mib("VmRSS")
    start = time.perf_counter()
    logits = (hidden_state @ head)[None]  # [1, T, V], as the LM head gives them
    if implementation == "previous":
        logp, entropy = previous_token_logprobs(logits / TEMPERATURE, ids, banned, mask)
    else:
        logp, entropy = token_logprobs(logits, ids, banned, mask, TEMPERATURE)
    del logits  # the graph keeps what it needs, as in the trainer
    (-(logp * mask).sum() / mask.sum()).backward()  # ``entropy`` (and any graph it has) lives on
    seconds = time.perf_counter() - start
    peak = _status_mib("VmHWM") - before
    torch.save(
        {"logp": logp.detach(), "entropy": entropy.detach(), "peak_mib": peak, "seconds": seconds}, out
    )


def measure(implementation: str, a: argparse.Namespace, tmp: str) -> dict:
    import torch

    out = os.path.join(tmp, f"{implementation}.pt")
    me = [str(Path(__file__).resolve()), "--worker", implementation, out]
    sizes = ["--tokens", str(a.tokens), "--vocab", str(a.vocab), "--hidden", str(a.hidden)]
    r = subprocess.run([sys.executable, *me, *sizes], capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"the {implementation} worker failed ({r.returncode}):\n{r.stderr[-3000:]}")
    return torch.load(out)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=None, help="response length T (default 4096; smoke 256)")
    p.add_argument("--vocab", type=int, default=151936, help="vocabulary size V (Qwen-VL's)")
    p.add_argument("--hidden", type=int, default=16, help="the hidden width H of the random LM head")
    p.add_argument("--smoke", action="store_true", help="256 tokens (seconds): checks it runs")
    p.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)
    a = p.parse_args()
    a.tokens = a.tokens or (256 if a.smoke else 4096)
    if a.worker:
        worker(a.worker[0], a.tokens, a.vocab, a.hidden, a.worker[1])
        return
    with tempfile.TemporaryDirectory() as tmp:
        previous, chunked = (measure(name, a, tmp) for name in ("previous", "chunked"))
    diffs = {key: float((previous[key] - chunked[key]).abs().max()) for key in ("logp", "entropy")}
    print(f"{'':>10} {'peak MiB':>10} {'seconds':>8}   (T={a.tokens}, V={a.vocab})")
    for name, r in (("previous", previous), ("chunked", chunked)):
        print(f"{name:>10} {r['peak_mib']:>10.1f} {r['seconds']:>8.2f}")
    print(f"max |difference|: log-probs {diffs['logp']:.3g}, entropy {diffs['entropy']:.3g}")
    out = {
        "peak_ratio": previous["peak_mib"] / chunked["peak_mib"],
        "max_abs_diff": max(diffs.values()),
        "peak_mib_previous": previous["peak_mib"],
        "peak_mib_chunked": chunked["peak_mib"],
        "tokens": a.tokens,
        "vocab": a.vocab,
        "seconds_previous": previous["seconds"],
        "seconds_chunked": chunked["seconds"],
    }
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}))


if __name__ == "__main__":
    main()
