"""One video, n responses: the trainer's passes with each group's prompt read once (shared prefix)
vs once per response (unshared), side by side on the same experience.

Profile (the full mode): a Qwen3-VL-architecture model wide enough that the language model
dominates (hidden 1,024, 4 layers, 16 query and 8 key/value heads of 64, MLP 2,816; a tiny frozen
vision tower whose features both variants encode once per step and reuse), one video prompt of
about 4,096 tokens (80 frames of 320x320 through the real data path: 40 temporal patches of 100
merged tokens, plus their timestamps and the question), and n = 8 responses of 256 to 512
tokens. Timed: what the trainer runs after the rollout, the old-log-prob pass and one update
(gradient checkpointing on, as the GPU recipes run); a micro-batch holds the whole group in both
variants (``trainer.micro_batch_size`` = n), so the peaks compare the same work: the unshared
variant's n padded rows, the shared variant's one row. Each variant
runs in its own process (a warm-up step, then the timed steps; the fastest is reported), with one
intra-op thread, timed by its CPU time (a shared machine's wall clock measures its other load);
its peak is the resident set size above its size before the first step.

Printed: ``step_ratio`` (unshared step time / shared), ``peak_ratio`` (unshared peak memory above
the start / shared), ``tokens_ratio`` (the language-model tokens each computes: the ideal), the
times, peaks and token counts, and ``max_abs_diff`` between the two variants' old log-probs.
Usage: python benchmarks/shared_prefix.py [--steps 1] [--smoke]
(``--smoke``: a 1-layer 64-wide model, an 8-frame video, 4 responses of 8 to 16 tokens, one step.)

``--demo OUT``: the demo (``configs/demo.yaml``, its warm-up and 150 RL steps) trained twice under
OUT, ``trainer.shared_prefix=off`` and ``on``, one after the other with one thread each; prints
their final held-out accuracies, the mean step time of each and ``demo_step_ratio`` (off / on),
the same for the passes the layout changes (log-probs and update), and the mean
``perf/prefix_tokens_saved`` (one JSON line; about 10 minutes on 2 CPU cores).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's package, not an installed copy

RESULT_KEYS = (
    "step_ratio",
    "peak_ratio",
    "tokens_ratio",
    "step_s_unshared",
    "step_s_shared",
    "peak_mib_unshared",
    "peak_mib_shared",
    "tokens_unshared",
    "tokens_shared",
    "prompt_tokens",
    "responses",
    "max_abs_diff",
)
FULL = dict(hidden=1024, layers=4, frames=80, side=320, n=8, shortest=256, longest=512)
SMOKE = dict(hidden=64, layers=1, frames=8, side=64, n=4, shortest=8, longest=16)


def make_assets(out: Path, size: dict) -> tuple[str, str]:
    """The model (random weights) and one record: a video of ``frames`` random frames."""
    import numpy as np
    import torch
    from transformers import AutoModelForImageTextToText

    from easyvideor1.media.encode import encode_video
    from easyvideor1.models.families import QWEN_SPECIAL_TOKENS
    from easyvideor1.models.tiny import build_processor, tiny_config

    processor = build_processor("qwen3_vl")
    tok = processor.tokenizer
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS}
    config = tiny_config("qwen3_vl", len(tok), ids, hidden=size["hidden"], layers=size["layers"])
    if size["hidden"] >= 1024:  # a real model's proportions: 16 heads of 64, 8 for keys and values
        text = config.text_config
        text.num_attention_heads, text.num_key_value_heads, text.head_dim = 16, 8, 64
        text.intermediate_size, text.max_position_embeddings = 2816, 32768
        text.rope_parameters = {**text.rope_parameters, "mrope_section": [12, 10, 10]}
    config.vision_config.depth = 1
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(config)
    model.save_pretrained(out / "model")
    processor.save_pretrained(out / "model")
    rng = np.random.default_rng(0)
    side = size["side"]
    frames = [rng.integers(0, 255, (side, side, 3), dtype=np.uint8) for _ in range(size["frames"])]
    encode_video(str(out / "video.mp4"), frames, 2.0)
    record = {
        "problem_id": "video",
        "videos": [str(out / "video.mp4")],
        "problem": "What happens in the video?",
        "problem_type": "multiple choice",
        "answer": "A",
        "options": ["A. yes", "B. no"],
    }
    (out / "records.jsonl").write_text(json.dumps(record) + "\n")
    return str(out / "model"), str(out / "records.jsonl")


def build(model_dir: str, records: str, size: dict):
    """The model (frozen tower, gradient checkpointing) and the step's experience: the prompt and
    ``n`` random responses of ``shortest`` to ``longest`` tokens."""
    import torch

    from _step_profile import random_experience  # a helper next to this script
    from easyvideor1.data.config import DataConfig
    from easyvideor1.data.dataset import RecordDataset, encode_prompts
    from easyvideor1.models.loading import load_policy
    from easyvideor1.resolve import resolve_data

    model, processor = load_policy(model_dir, freeze_vision_tower=True, gradient_checkpointing=True)
    pixels = size["side"] ** 2
    cfg = DataConfig(
        video_fps=None,
        video_nframes=size["frames"],
        video_min_pixels=pixels,
        video_max_pixels=pixels,
        max_prompt_length=32768,
    )
    dataset = RecordDataset.from_files([records], resolve_data(cfg, model_dir))
    sample = dataset[0]
    batch = encode_prompts(processor, [sample], dataset.cfg, dataset.loader)
    gen = torch.Generator().manual_seed(0)
    exp = random_experience(batch, [0] * size["n"], size["shortest"], size["longest"], gen)
    return model, processor, exp


def run_variant(shared: str, model_dir: str, records: str, size: dict, steps: int) -> dict:
    """Time ``steps`` steps (after a warm-up one) with ``trainer.shared_prefix`` = ``shared``."""
    import torch

    from easyvideor1.models.logprobs import Packing, PolicyForward
    from easyvideor1.models.vision_cache import VisionFeatureCache
    from easyvideor1.rollout.base import banned_token_ids
    from easyvideor1.trainer.update import (
        UpdateSettings,
        experience_logprobs,
        forward_tokens,
        policy_update,
    )

    torch.set_num_threads(1)  # one thread, timed by its CPU time
    model, processor, exp = build(model_dir, records, size)
    model.train()
    cache = VisionFeatureCache([model])  # the tower's features once per step, in both variants
    # unshared: the padded forward (a packed row of n long sequences runs sdpa under an S x S mask)
    packing = Packing(micro_batch_size=size["n"], shared_prefix=shared)
    forward = PolicyForward(model, None, cache, banned_token_ids(processor.tokenizer), packing=packing)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    everything = list(range(len(exp)))
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times = []
    for step in range(steps + 1):
        t0 = time.process_time()
        cache.start(exp.batch)
        exp.old_logp, _ = experience_logprobs(forward, exp)
        policy_update(forward, optimizer, None, exp, [everything], UpdateSettings())
        cache.stop()
        if step:  # the first step warms up
            times.append(time.process_time() - t0)
    peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024  # KiB on Linux
    return {
        "step_s": min(times),
        "peak_mib": peak,
        # the real tokens each computes (the unshared padded rows also compute their padding)
        "tokens": forward_tokens(exp, everything, Packing(padding_free=True, shared_prefix=shared)),
        "prompt_tokens": int(exp.batch.inputs["attention_mask"].sum()),
        "responses": exp.mask.sum(1).tolist(),
        "old_logp": exp.old_logp[exp.mask.bool()].tolist(),
    }


DEMO_KEYS = (
    "demo_accuracy_off",
    "demo_accuracy_on",
    "demo_step_ratio",
    "demo_passes_ratio",
    "demo_step_s_off",
    "demo_step_s_on",
    "demo_prefix_tokens_saved",
)


def demo_summary(metrics_file: Path) -> dict:
    """A demo run's final held-out accuracy and the means of its RL steps' times."""
    steps, accuracy = [], None
    for line in metrics_file.read_text().splitlines():
        row = json.loads(line)
        if "val/accuracy" in row:
            accuracy = row["val/accuracy"]
        if "time/step" in row:
            steps.append(row)

    def mean(key: str) -> float:
        return sum(r[key] for r in steps) / len(steps)

    return {
        "accuracy": accuracy,
        "step_s": mean("time/step"),
        "passes_s": mean("time/logprobs") + mean("time/update"),
        "saved": mean("perf/prefix_tokens_saved"),
    }


def demo(out: Path) -> dict:
    """The demo trained with shared prefixes off, then on (the same data, model and seed)."""
    import os

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    config = ROOT / "src" / "easyvideor1" / "configs" / "demo.yaml"
    runs = {}
    for shared in ("off", "on"):
        run_dir = out / f"shared_{shared}"
        cmd = [sys.executable, "-m", "easyvideor1", "train", f"config={config}", f"trainer.shared_prefix={shared}",
               f"trainer.output_dir={run_dir}", "trainer.resume=never", "trainer.loggers=[jsonl]"]  # fmt: skip
        r = subprocess.run(cmd, cwd=out, env=env, capture_output=True, text=True)
        if r.returncode:
            raise RuntimeError(f"the demo with shared_prefix={shared} failed:\n{r.stderr[-3000:]}")
        runs[shared] = demo_summary(run_dir / "metrics.jsonl")
    off, on = runs["off"], runs["on"]
    return {
        "demo_accuracy_off": off["accuracy"],
        "demo_accuracy_on": on["accuracy"],
        "demo_step_ratio": off["step_s"] / on["step_s"],
        "demo_passes_ratio": off["passes_s"] / on["passes_s"],
        "demo_step_s_off": off["step_s"],
        "demo_step_s_on": on["step_s"],
        "demo_prefix_tokens_saved": on["saved"],
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=1, help="timed steps after the warm-up one")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument(
        "--demo", metavar="OUT", help="the demo trained with shared prefixes off and on under OUT"
    )
    ap.add_argument(
        "--variant", nargs=4, metavar=("SHARED", "MODEL", "RECORDS", "OUT"), help=argparse.SUPPRESS
    )
    args = ap.parse_args(argv)
    size = SMOKE if args.smoke else FULL
    if args.demo:
        Path(args.demo).mkdir(parents=True, exist_ok=True)
        print(json.dumps(demo(Path(args.demo).resolve())))
        return 0
    if args.variant:
        shared, model_dir, records, out = args.variant
        Path(out).write_text(json.dumps(run_variant(shared, model_dir, records, size, args.steps)))
        return 0
    steps = 1 if args.smoke else args.steps
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model_dir, records = make_assets(work, size)
        rows = {}
        for shared in ("off", "on"):  # each in its own process: its peak is its own
            out = work / f"{shared}.json"
            smoke = ["--smoke"] if args.smoke else []
            cmd = [
                sys.executable,
                __file__,
                *smoke,
                "--steps",
                str(steps),
                "--variant",
                shared,
                model_dir,
                records,
                str(out),
            ]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode:
                raise RuntimeError(f"variant shared_prefix={shared} failed:\n{r.stderr[-3000:]}")
            rows[shared] = json.loads(out.read_text())
    off, on = rows["off"], rows["on"]
    diff = max(abs(a - b) for a, b in zip(off.pop("old_logp"), on.pop("old_logp"), strict=True))
    print(f"{'variant':<10}{'step s':>10}{'peak MiB':>10}{'LM tokens':>11}")
    for name, row in (("unshared", off), ("shared", on)):
        print(f"{name:<10}{row['step_s']:>10.2f}{row['peak_mib']:>10.0f}{row['tokens']:>11}")
    result = {
        "step_ratio": off["step_s"] / on["step_s"],
        "peak_ratio": off["peak_mib"] / max(on["peak_mib"], 1e-9),
        "tokens_ratio": off["tokens"] / on["tokens"],
        "step_s_unshared": off["step_s"],
        "step_s_shared": on["step_s"],
        "peak_mib_unshared": off["peak_mib"],
        "peak_mib_shared": on["peak_mib"],
        "tokens_unshared": off["tokens"],
        "tokens_shared": on["tokens"],
        "prompt_tokens": on["prompt_tokens"],
        "responses": on["responses"],
        "max_abs_diff": diff,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
