"""``filter``: keep the records a model solves sometimes but not always (``easyvideor1.curation``)."""

from __future__ import annotations

import argparse
import os

from ..config import ConfigError
from ..rollout.engines import engine_names
from .common import (
    add_cache_flags,
    add_model_flag,
    add_reuse_out_flag,
    add_sampling_flags,
    add_vllm_engine_flags,
    flag_values,
    number_above_zero,
    run_config,
)

# flag -> rollout.* key it defaults to (config=run.yaml brings the training run's sampling along)
_FROM_ROLLOUT = {
    "n": "n",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "max_new_tokens": "max_new_tokens",
}


def cmd_filter(args: argparse.Namespace, extra: list[str]) -> int:
    from ..curation import FilterSettings, curate

    cfg = run_config(args, extra, flag_values(args))
    paths = list(args.data or cfg.data.train_files)
    if not paths:
        raise ConfigError("no data files: give --data FILE (repeatable; or data.train_files in config=FILE)")
    model = args.model or cfg.model.path
    if not model:
        raise ConfigError("no model: give --model DIR (or model.path in config=FILE)")
    if not os.path.exists(model):
        raise ConfigError(f"model directory not found: {model}")
    values = {flag: getattr(cfg.rollout, key) for flag, key in _FROM_ROLLOUT.items()}
    values.update({k: getattr(args, k) for k in _FROM_ROLLOUT if getattr(args, k) is not None})
    settings = FilterSettings(
        **values,
        seed=args.seed,
        keep=args.keep,
        pass_threshold=list(args.pass_threshold or []),
        engine=args.engine,
        dtype=args.dtype,
        load_workers=args.load_workers,
        max_in_flight=args.max_in_flight,
    )

    curate(cfg, settings, paths, model, args.out, reuse_out=args.reuse_out)
    return 0


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from e


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "filter",
        help="sample each record n times, score with the reward library, keep those within a pass-rate band",
        description="Offline pass-rate curation (docs/concepts/curation.md). Writes OUT/pass_rates.jsonl, "
        "OUT/kept/<input name> in each input's format, OUT/report.{json,md,html} and "
        "OUT/pass_rate_histogram.png; resumable after a kill. config=FILE.yaml and data.*/reward.*/rollout.* "
        "key=value overrides follow the flags.",
    )
    add_model_flag(p)
    p.add_argument(
        "--data",
        action="append",
        metavar="FILE",
        help="records file (JSONL, JSON array, Parquet); repeatable",
    )
    p.add_argument("--out", required=True, help="output directory (a rerun resumes in it)")
    add_reuse_out_flag(p, "filter", "its pass_rates.jsonl, kept/ and report files")
    p.add_argument("--n", type=number_above_zero(int), help="responses per record (default rollout.n: 8)")
    p.add_argument(
        "--keep",
        default="0.1:0.9",
        metavar="LO:HI",
        help="kept pass-rate band, inclusive (default 0.1:0.9; with n=8 that is 0 < pass rate < 1)",
    )
    p.add_argument(
        "--pass-threshold",
        action="append",
        metavar="X|TASK=X",
        help="accuracy a response needs to pass: one value for every task, or TASK=X (repeatable); "
        "default 1.0 for exact-answer tasks and OCR, 0.5 (IoU) for grounding/tracking/segmentation, "
        "0.5 for regression and open-ended",
    )
    p.add_argument(
        "--temperature", type=_number, help="sampling temperature (default rollout.temperature: 1.0)"
    )
    p.add_argument("--top-p", type=_number, help="nucleus mass (default rollout.top_p: 1.0)")
    p.add_argument("--top-k", type=int, help="top-k, 0 = whole vocabulary (default rollout.top_k: 0)")
    p.add_argument(
        "--max-new-tokens",
        type=number_above_zero(int),
        help="response length (default rollout.max_new_tokens)",
    )
    p.add_argument(
        "--seed", type=int, default=0, help="run seed; each record's seed derives from it and its id"
    )
    p.add_argument("--dtype", choices=["float32", "bfloat16", "auto"], default="float32", help="both engines")
    p.add_argument("--load-workers", type=number_above_zero(int), default=2, help="media loader processes")
    g = p.add_argument_group("engine")
    g.add_argument(
        "--engine", choices=engine_names(), default="hf", help="hf: generate (default); vllm: AsyncLLM"
    )
    g.add_argument("--max-in-flight", type=number_above_zero(int), default=64, help="vllm: records at once")
    add_vllm_engine_flags(g)
    add_sampling_flags(p)
    add_cache_flags(p)
    p.set_defaults(func=cmd_filter)
