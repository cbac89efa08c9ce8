"""Judged samples per second: the concurrent endpoint client vs one request at a time.

One ``easyvideor1 serve`` server (its HF engine batches the requests that arrive together) on a
tiny Qwen3-VL, on localhost; the same judge prompts (each distinct, no cache) sent one after
another, then through :class:`~easyvideor1.rewards.judge.JudgeClient` with ``max_concurrency``
requests open. Printed: ``concurrent_vs_serial`` (serial seconds / concurrent seconds) with both
rates.
Usage: python benchmarks/judge.py [--n 32] [--concurrency 8] [--smoke]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's package, not an installed copy

import torch  # noqa: E402

from easyvideor1.models.tiny import make_tiny_model  # noqa: E402
from easyvideor1.rewards.judge import JudgeClient, JudgeConfig  # noqa: E402
from easyvideor1.rollout.server import load_server  # noqa: E402

RESULT_KEYS = ("concurrent_vs_serial", "serial_samples_per_s", "concurrent_samples_per_s", "n", "concurrency")


def prompt(i: int, salt: str) -> list[dict]:
    return [
        {
            "role": "user",
            "content": f"Ground truth: a red ball moves left.\nModel answer: answer {salt}-{i}.\n"
            "Give a last line exactly 'Judgement: 1' or 'Judgement: 0'.",
        }
    ]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=32)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--tokens", type=int, default=24)
    p.add_argument("--smoke", action="store_true", help="4 samples, 2 at a time, the same keys")
    a = p.parse_args()
    n, conc, tokens = (4, 2, 4) if a.smoke else (a.n, a.concurrency, a.tokens)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        server = load_server(make_tiny_model(str(Path(tmp) / "model"), "qwen3vl"), "tiny", port=0)
        server.start()
        try:
            base = {"url": server.url, "model": "tiny", "max_tokens": tokens}
            serial = JudgeClient(JudgeConfig(**base, max_concurrency=1))
            serial.ask(prompt(0, "warm"))  # first request: lazy start-up, not timed
            t0 = time.perf_counter()
            for i in range(n):
                assert serial.ask(prompt(i, "serial")).ok
            serial_s = time.perf_counter() - t0
            serial.close()
            client = JudgeClient(JudgeConfig(**base, max_concurrency=conc))
            t0 = time.perf_counter()
            replies = [f.result() for f in [client.submit(prompt(i, "concurrent")) for i in range(n)]]
            concurrent_s = time.perf_counter() - t0
            client.close()
            assert all(r.ok for r in replies)
        finally:
            server.close()
    out = {
        "concurrent_vs_serial": serial_s / concurrent_s,
        "serial_samples_per_s": n / serial_s,
        "concurrent_samples_per_s": n / concurrent_s,
        "n": n,
        "concurrency": conc,
    }
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}))


if __name__ == "__main__":
    main()
