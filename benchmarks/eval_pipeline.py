"""Evaluation throughput: the pipeline (loader threads overlapped with generation) vs a serial loop
(decode, then generate, one sample at a time), same samples, model and settings, one run.

Also prints the ideal overlap bound from the measured stage times: with loading spread over the
cores that generation leaves free and overlapped with it, a run cannot be faster than
max(generation time, loading time / free cores). Usage: python benchmarks/eval_pipeline.py
"""

from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from easyvideor1.data.config import DataConfig  # noqa: E402
from easyvideor1.data.dataset import encode_prompts, load_media  # noqa: E402
from easyvideor1.data.synthetic import random_scene, render_frames, scene_records  # noqa: E402
from easyvideor1.evaluation import get_benchmark  # noqa: E402
from easyvideor1.evaluation.config import EvalConfig  # noqa: E402
from easyvideor1.evaluation.pipeline import BenchmarkInputs, RecordDataset, run_benchmark  # noqa: E402
from easyvideor1.media.cache import VideoLoader  # noqa: E402
from easyvideor1.media.encode import encode_video  # noqa: E402
from easyvideor1.models.loading import load_policy  # noqa: E402
from easyvideor1.models.tiny import make_tiny_model  # noqa: E402
from easyvideor1.rollout.base import SamplingConfig  # noqa: E402
from easyvideor1.rollout.hf import HFRolloutEngine  # noqa: E402


def main() -> None:
    import torch

    torch.set_num_threads(1)  # generation on one core; the other core is the loaders' (2-core machine)
    work = Path(tempfile.mkdtemp(prefix="evr1-eval-"))
    syn = work / "syn"
    (syn / "videos").mkdir(parents=True)
    rows = []
    for i in range(12):  # real-sized sources: decoding is a real share of the work
        scene = random_scene(random.Random(i), 640, 360, 30.0, 8.0)
        rel = f"videos/v{i}.mp4"
        encode_video(str(syn / rel), render_frames(scene, i), 30.0)
        rows += scene_records(scene, rel, f"v{i}")[:2]
    (syn / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    model_dir = make_tiny_model(str(work / "model"))
    model, processor = load_policy(model_dir)
    engine = HFRolloutEngine(model, processor)
    data = DataConfig(
        video_fps=2.0,
        video_min_pixels=1024,
        video_max_pixels=4096,
        cache_mode="decode_only",
        video_root=str(syn),
        prompt_template="none",
    )
    spec = get_benchmark("synthetic")
    records = spec.load(str(syn))
    settings = EvalConfig(max_new_tokens=24, batch_size=1, load_workers=2)
    ann = str(syn / "records.jsonl")
    inputs = BenchmarkInputs.build(spec, records, ann, settings)

    # serial: decode, then generate, one sample at a time
    from easyvideor1.evaluation.pipeline import eval_data_config  # noqa: E402

    ds = RecordDataset(
        inputs.prompted(),
        eval_data_config(data),
        ann,
        VideoLoader(None, "decode_only"),
    )
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=24)
    t_load = t_gen = 0.0
    t0 = time.perf_counter()
    for i in range(len(ds)):
        t = time.perf_counter()
        s = ds[i]
        s.loaded = load_media(s, ds.cfg, ds.loader)
        t_load += time.perf_counter() - t
        t = time.perf_counter()
        engine.generate(encode_prompts(processor, [s], ds.cfg, ds.loader), [1], sampling)
        t_gen += time.perf_counter() - t
    serial = time.perf_counter() - t0

    res = run_benchmark(
        inputs,
        engine,
        processor,
        data,
        settings,
        str(work / "out"),
        model_dir,
        VideoLoader(None, "decode_only"),
    )
    pipelined = res["seconds"]
    import os

    # Loading can only overlap on the cores generation leaves free (one here: 2 cores, one generating).
    free_cores = max(1, min(settings.load_workers, (os.cpu_count() or 2) - 1))
    bound = max(t_gen, t_load / free_cores)
    n = len(records)
    print(f"{n} samples (8 s 640x360 sources, 16 frames each), tiny Qwen3-VL, greedy, batch 1")
    print(
        f"serial loop: {serial:.2f} s ({n / serial:.1f} samples/s; loading {t_load:.2f} s + generation {t_gen:.2f} s)"
    )
    print(
        f"pipeline:    {pipelined:.2f} s ({n / pipelined:.1f} samples/s) -> {serial / pipelined:.2f}x the serial loop"
    )
    print(
        f"ideal overlap bound max(generation, loading / {free_cores} free core(s)): {bound:.2f} s "
        f"-> the pipeline reaches {100 * bound / pipelined:.0f}% of it"
    )
    print(
        json.dumps(
            {
                "speedup_vs_serial": round(serial / pipelined, 2),
                "fraction_of_bound": round(bound / pipelined, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
