"""The whole ``easyvideor1 filter`` job: check inputs, sample (resumable), write results and report."""

from __future__ import annotations

import dataclasses
import os
from typing import Protocol

from .. import threads
from ..data.config import DataConfig
from ..outdir import Reuse, hold
from ..resolve import resolve_data
from ..rewards import RewardConfig
from ..rollout.config import RolloutConfig
from ..rollout.engines import load_engine
from ..threads import CPUConfig
from .filter import FilterSettings, run_filter, settings_digest, to_sample
from .inputs import InputFile, load_inputs
from .outputs import collect, write_json_lines, write_kept
from .report import write_report

PASS_RATES = "pass_rates.jsonl"


class FilterSections(Protocol):
    """The sections of the run configuration a filter job reads (a ``RunConfig`` has them; the run
    config sits above curation in the layers, so curation names what it reads instead)."""

    data: DataConfig
    reward: RewardConfig
    rollout: RolloutConfig  # its vllm section configures the vllm engine
    cpu: CPUConfig


def curate(
    cfg: FilterSections,
    settings: FilterSettings,
    paths: list[str],
    model: str,
    out_dir: str,
    reuse_out: bool = False,
) -> dict:
    """Filter the records of ``paths`` by ``model``'s pass rate; returns the report dict.
    ``reuse_out``: write into a non-empty ``out_dir`` that no earlier filter run wrote.

    Inputs are read and checked before the engine of ``settings.engine`` loads the model (one
    request per ``generate``: each record's samples are seeded); the engine is closed (vLLM's
    engine process stopped) before the results are written."""
    from ..evaluation.identity import model_fingerprint

    reward = cfg.reward
    files = load_inputs(paths, reward)
    # the checkpoint names the family (frame size); data.model_family checks it
    data = resolve_data(cfg.data, model)
    model_id = model_fingerprint(model)
    # two runs appending to one responses.jsonl mix their rows; another folder's files are not replaced
    with hold(out_dir, "--out", "filter", Reuse(("filter",), "--reuse-out", asked=reuse_out)):
        items, _, todo = to_sample(files, data, settings, out_dir, model_id)
        stats = {"records": len(items), "sampled": 0, "reused": len(items), "seconds": 0.0}
        if todo:  # a rerun with every record sampled (another band, other thresholds) loads no model
            # the loaders keep their cores
            threads.apply(explicit=cfg.cpu.threads, reserved=settings.load_workers)
            engine, processor = load_engine(
                model, settings.engine, settings.dtype, cfg.rollout.vllm, max_batch=1
            )
            try:
                stats = run_filter(files, data, reward, settings, out_dir, model_id, engine, processor)
            finally:
                engine.close()
        else:
            print(f"filter: all {len(items)} records already sampled; no model loaded")
        report = finish(files, data, reward, settings, out_dir, model, model_id)
    t = report["totals"]
    print(
        f"filter: {t['kept']} of {t['total']} records kept ({t['always_solved']} always solved, "
        f"{t['never_solved']} never solved, {t['failed_to_load']} failed to load; "
        f"{stats['sampled']} sampled now, {stats['reused']} reused, {stats['seconds']:.1f} s)"
    )
    print(f"report: {os.path.join(out_dir, 'report.md')}")
    return report


def finish(
    files: list[InputFile],
    data: DataConfig,
    reward: RewardConfig,
    settings: FilterSettings,
    out_dir: str,
    model: str,
    model_id: str,
) -> dict:
    """``pass_rates.jsonl``, the kept files and the report, from ``OUT/responses.jsonl`` alone."""
    digest = settings_digest(settings, data, model_id)
    results = collect(files, settings, reward, out_dir, digest)
    write_json_lines(os.path.join(out_dir, PASS_RATES), [r.row() for r in results])
    outputs = write_kept(files, results, out_dir)
    tasks = sorted({r.item.task for r in results})
    meta = {
        "model": model,
        "model_fingerprint": model_id,
        "settings_digest": digest,
        "settings": settings.generation(),
        "band": settings.band.describe(),
        "pass_rule": settings.rule.describe(),
        "thresholds": {task: settings.rule.threshold(task) for task in tasks},
        "frames": {
            k: v for k, v in dataclasses.asdict(data).items() if k.startswith(("video_", "image_", "model_"))
        },
        "prompt_template": data.prompt_template,
        "inputs": [f.path for f in files],
    }
    return write_report(results, meta, outputs, out_dir)
