"""``plan``: each phase's memory per GPU, the KV cache's room and a time estimate of a run, from
its config, before any GPU is rented (``src/easyvideor1/plan/``)."""

from __future__ import annotations

import argparse

from ..config import RunConfig, load_config
from .common import number_above_zero, split_extra


def cmd_plan(args: argparse.Namespace, extra: list[str]) -> int:
    from ..plan import Hardware, plan
    from ..plan.report import table, to_json

    config_file, overrides = split_extra(extra)
    flags = {"gpus": args.gpus, "gpu_memory_gib": args.gpu_memory, "gpu": args.gpu, "mfu": args.mfu}
    values = {"plan": {k: v for k, v in flags.items() if v is not None}}
    cfg = load_config(RunConfig, config_file, overrides, values=values)
    result = plan(cfg, Hardware.of(cfg.plan))
    print(to_json(result) if args.json else table(result))
    return 0 if result.fits or not args.check else 3


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "plan",
        help="predict each phase's GPU memory, the KV cache and a step's time, without a GPU",
        description="easyvideor1 plan config=RUN.yaml [--gpus N] [--gpu-memory GiB] [key=value ...]: "
        "the memory per GPU of each phase of a step (generation, log-probs, the update, the weight "
        "push), whether it fits, and the settings that would make it fit.",
    )
    p.add_argument("--gpus", type=number_above_zero(int), help="GPUs of the run (plan.gpus, default 1)")
    p.add_argument("--gpu-memory", type=number_above_zero(float), metavar="GIB", help="memory of one GPU in GiB (plan.gpu_memory_gib)")  # fmt: skip
    p.add_argument("--gpu", help="h100, h200, a100 or b200: memory and speed defaults (plan.gpu)")
    p.add_argument("--mfu", type=float, help="share of peak FLOPS the time estimate assumes (plan.mfu)")
    p.add_argument("--json", action="store_true", help="the plan as JSON (fits, phases, kv_cache, estimate)")
    p.add_argument("--check", action="store_true", help="exit 3 when a phase does not fit")
    p.set_defaults(func=cmd_plan)
