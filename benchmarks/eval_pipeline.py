"""Evaluation throughput: the pipeline (loader processes overlapped with generation) vs a serial loop
(decode, then generate, one sample at a time), same samples, model and settings, one run.

Also prints the ideal overlap bound from the measured stage times: a run cannot be faster than
max(generation time, loading time / loaders, (loading + generation) / cores), and the share of it
the pipeline reaches (``overlap_efficiency``). Usage: python benchmarks/eval_pipeline.py [--smoke]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's package, not an installed copy

from easyvideor1.data.config import DataConfig  # noqa: E402
from easyvideor1.data.dataset import encode_prompts, load_media  # noqa: E402
from easyvideor1.data.synthetic import random_scene, render_frames, scene_records  # noqa: E402
from easyvideor1.evaluation import get_benchmark  # noqa: E402
from easyvideor1.evaluation.config import EvalConfig  # noqa: E402
from easyvideor1.evaluation.pipeline import (  # noqa: E402
    BenchmarkInputs,
    RecordDataset,
    eval_data_config,
    run_benchmark,
)
from easyvideor1.evaluation.report_html import thumbnail_strip  # noqa: E402
from easyvideor1.media.cache import VideoLoader  # noqa: E402
from easyvideor1.media.decode import set_decode_threads  # noqa: E402
from easyvideor1.media.encode import encode_video  # noqa: E402
from easyvideor1.models.tiny import make_tiny_model  # noqa: E402
from easyvideor1.resolve import resolve_data  # noqa: E402
from easyvideor1.rollout.base import SamplingConfig  # noqa: E402
from easyvideor1.rollout.engines import load_engine  # noqa: E402

# the JSON line's keys, full and --smoke (tests/benchmarks/test_smoke.py checks them)
RESULT_KEYS = (
    "samples",
    "rounds",
    "speedup_vs_serial",
    "overlap_efficiency",
    "round_efficiencies",
    "bound_s",
    "pipeline_s",
    "serial_s",
    "serial_load_s",
    "serial_generate_s",
    "pipeline_load_s",
    "pipeline_generate_s",
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--smoke", action="store_true", help="tiny sizes (seconds): checks it runs, not its figures"
    )
    args = ap.parse_args()
    # full: real-sized sources, decoding a real share of the work; smoke: a few short ones
    videos, seconds, max_new, rounds = (3, 2.0, 4, 1) if args.smoke else (24, 8.0, 24, 5)
    import torch

    torch.set_num_threads(1)  # generation on one core; the other core is the loaders' (2-core machine)
    work = Path(tempfile.mkdtemp(prefix="evr1-eval-"))
    syn = work / "syn"
    (syn / "videos").mkdir(parents=True)
    rows = []
    for i in range(videos):
        scene = random_scene(random.Random(i), 640, 360, 30.0, seconds)
        rel = f"videos/v{i}.mp4"
        encode_video(str(syn / rel), render_frames(scene, i), 30.0)
        rows += scene_records(scene, rel, f"v{i}")[:2]
    (syn / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    model_dir = make_tiny_model(str(work / "model"))
    settings = EvalConfig(max_new_tokens=max_new, batch_size=1, load_workers=2)
    # the engine `easyvideor1 eval` builds: batch_size requests per generate, in both loops
    engine, processor = load_engine(model_dir, "hf", settings.dtype, max_batch=settings.batch_size)
    data = resolve_data(
        DataConfig(
            video_fps=2.0,
            video_min_pixels=1024,
            video_max_pixels=4096,
            cache_mode="decode_only",
            video_root=str(syn),
            prompt_template="none",
        ),
        model_dir,
    )  # as `easyvideor1 eval` does: the checkpoint names the family (frame size)
    spec = get_benchmark("synthetic")
    records = spec.load(str(syn))
    ann = str(syn / "records.jsonl")
    inputs = BenchmarkInputs.build(spec, records, ann, settings)

    ds = RecordDataset(inputs.prompted(), eval_data_config(data), ann, VideoLoader(None, "decode_only"))
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=max_new)
    # the serial loop decodes as each loader does, one FFmpeg thread (rollout/pipeline.py): a stage
    # time measured with FFmpeg's own threads on both cores cannot be spread over the free ones
    set_decode_threads(1)
    # one untimed generate first: lazy initialisation must not inflate either loop's figures
    first = ds[0]
    engine.generate(encode_prompts(processor, [first], ds.cfg, ds.loader), [1], sampling)

    # Rounds of (serial loop, pipeline), back to back: each round's bound comes from the serial stage
    # times measured just before its pipeline, so a shared machine's drift (its load swings a single
    # run by 2x) moves both sides alike; the figures printed are the median round's.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    per_round = []
    for r in range(rounds):
        # serial: the same work as eval's, decode (and thumbnail), then generate, one sample at a time
        t_load = t_gen = 0.0
        t0 = time.perf_counter()
        for i in range(len(ds)):
            t = time.perf_counter()
            s = ds[i]
            s.loaded = load_media(s, ds.cfg, ds.loader)
            thumbnail_strip(*s.loaded)  # the report's strip: eval's loaders make one per sample too
            t_load += time.perf_counter() - t
            t = time.perf_counter()
            engine.generate(encode_prompts(processor, [s], ds.cfg, ds.loader), [1], sampling)
            t_gen += time.perf_counter() - t
        serial = time.perf_counter() - t0
        out = str(work / f"out{r}")  # a fresh output directory: nothing resumed
        res = run_benchmark(
            inputs, engine, processor, data, settings, out, model_dir, VideoLoader(None, "decode_only")
        )
        # No overlap beats the slowest of: generation (one request at a time), loading spread over
        # the loaders, and all the work spread over every core (loaders take the cycles generation
        # leaves)
        bound = max(t_gen, t_load / settings.load_workers, (t_load + t_gen) / cores)
        per_round.append(
            {
                "serial": serial,
                "load": t_load,
                "gen": t_gen,
                "pipeline": res["seconds"],
                "stage_load": res["stage_seconds"]["load"],
                "stage_gen": res["stage_seconds"]["generate"],
                "bound": bound,
                "efficiency": bound / res["seconds"],
            }
        )
    median = sorted(per_round, key=lambda x: x["efficiency"])[len(per_round) // 2]
    serial, t_load, t_gen, pipelined, bound = (
        median[k] for k in ("serial", "load", "gen", "pipeline", "bound")
    )
    stages = {"load": median["stage_load"], "generate": median["stage_gen"]}
    # what is not generating: the wait for the first sample (loader start-up, its decode) plus the
    # results written after the last request
    fill_drain = pipelined - stages["generate"]
    efficiencies = ", ".join(f"{x['efficiency']:.2f}" for x in per_round)
    n = len(records)
    print(f"{n} samples ({seconds:g} s 640x360 sources at 2 fps), tiny Qwen3-VL, greedy, batch 1")
    print(
        f"serial loop: {serial:.2f} s ({n / serial:.1f} samples/s; loading {t_load:.2f} s + generation {t_gen:.2f} s)"
    )
    print(
        f"pipeline:    {pipelined:.2f} s ({n / pipelined:.1f} samples/s; loaders {stages['load']:.2f} s, "
        f"generation stage {stages['generate']:.2f} s) -> {serial / pipelined:.2f}x the serial loop"
    )
    print(
        f"ideal overlap bound max(generation, loading / {settings.load_workers} loaders, "
        f"all work / {cores} cores): {bound:.2f} s "
        f"-> the pipeline reaches {100 * bound / pipelined:.0f}% of it (median round; rounds: {efficiencies}); "
        f"{fill_drain:.2f} s of the pipeline run is not the generate stage (first sample, writing results)"
    )
    print(
        json.dumps(
            {
                "samples": n,
                "rounds": rounds,
                "speedup_vs_serial": round(serial / pipelined, 2),
                "overlap_efficiency": round(bound / pipelined, 3),
                "round_efficiencies": [round(x["efficiency"], 3) for x in per_round],
                "bound_s": round(bound, 3),
                "pipeline_s": round(pipelined, 3),
                "serial_s": round(serial, 3),
                "serial_load_s": round(t_load, 3),
                "serial_generate_s": round(t_gen, 3),
                "pipeline_load_s": round(stages["load"], 3),
                "pipeline_generate_s": round(stages["generate"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
