"""``eval`` (with ``--list`` and ``--dry-run``), ``score`` and ``eval-compare``; the work is in
:mod:`easyvideor1.evaluation.commands`."""

from __future__ import annotations

import argparse
import os

from ..config import ConfigError, RunConfig, load_config
from ..config_loading import written_keys
from ..rollout.engines import engine_names
from ..rollout.sampling import SAMPLING_KEYS
from ..tools.base import tool_specs
from .common import (
    add_cache_flags,
    add_model_flag,
    add_reuse_out_flag,
    add_sampling_flags,
    add_vllm_engine_flags,
    data_values,
    flag_values,
    number_above_zero,
    split_extra,
)

# eval/score flags -> eval.* config keys (flags win over config=FILE and over a preset)
_EVAL_FLAGS = (
    "benchmarks annotations style max_new_tokens batch_size load_workers max_samples dtype engine "
    "max_in_flight preset probe"
).split()


def _eval_config(args: argparse.Namespace, extra: list[str]) -> RunConfig:
    """The run config with eval flags applied. Order: defaults < config=FILE < preset < flags < key=value.

    A preset (``--preset`` or ``eval.preset``) sets the frame budget and sampling unless flags or
    overrides set them; ``--video-root`` is the benchmarks' root (``eval.video_root``)."""
    from ..evaluation.presets import get_preset

    config_file, overrides = split_extra(extra)
    data = data_values(args)
    data.pop("video_root", None)  # eval's video root is the benchmarks' (eval.video_root)
    settings = {f: getattr(args, f) for f in _EVAL_FLAGS if getattr(args, f, None) is not None}
    if "benchmarks" in settings:
        settings["benchmarks"] = settings["benchmarks"].split(",")
    for flag in ("data", "benchmark_files"):
        if getattr(args, flag, None):
            settings[flag] = list(getattr(args, flag))
    if getattr(args, "group_by", None):
        settings["group_by"] = [g.strip() for arg in args.group_by for g in arg.split(",") if g.strip()]
    data.update(flag_values(args)["data"])  # where frames come from (data.*): not in the digest
    if getattr(args, "video_root", None) is not None:
        settings["video_root"] = args.video_root
    base = load_config(RunConfig, config_file, overrides)
    preset_name = settings.get("preset") or base.eval.preset
    if preset_name:
        preset = get_preset(preset_name)
        preset_data = dict(preset["data"])
        if base.data.video_nframes is not None:  # the user's fixed count replaces the preset's rate
            preset_data.pop("video_fps", None)
        data = {**preset_data, **data}
        settings = {**preset["sampling"], **settings}
    settings = {**_validation_sampling(config_file, overrides, base, settings), **settings}
    values = {"data": data, "eval": settings, "rollout": flag_values(args)["rollout"]}
    if getattr(args, "tools", None):
        values["tools"] = {"names": [t.strip() for t in args.tools.split(",") if t.strip()]}
    return load_config(RunConfig, config_file, overrides, values=values)


def _validation_sampling(
    config_file: str | None, overrides: list[str], base: RunConfig, settings: dict
) -> dict[str, object]:
    """``eval --data FILE config=run.yaml``: the sampling keys that no flag, preset or ``eval.*``
    key sets take the run's validation sampling (``rollout.validation_sampling()``, what validation
    answered with), so the records files are answered as the run's validation answered them.

    Only with a training run's config (it sets ``rollout`` or ``trainer`` keys) and records files
    evaluated alone: a registered benchmark keeps its own response length."""
    evaluated = {
        key: settings.get(key) or getattr(base.eval, key) for key in ("data", "benchmarks", "benchmark_files")
    }
    if not config_file or not evaluated["data"] or evaluated["benchmarks"] or evaluated["benchmark_files"]:
        return {}
    written = written_keys(config_file, overrides)
    if not any(key.split(".")[0] in ("rollout", "trainer") for key in written):
        return {}
    validation = base.rollout.validation_sampling()
    return {
        key: getattr(validation, key)
        for key in SAMPLING_KEYS
        if key != "return_logprobs" and f"eval.{key}" not in written
    }


def cmd_eval(args: argparse.Namespace, extra: list[str]) -> int:
    from ..evaluation import commands

    cfg = _eval_config(args, extra)
    if args.list:
        print(commands.benchmark_table(cfg.eval))
        return 0
    if not args.out:
        raise ConfigError("--out DIR is required")
    if args.dry_run:
        commands.dry_run(cfg, args.out, reuse_out=args.reuse_out)
        return 0
    if cfg.tools.enabled:  # before the model loads: an unknown tool
        tool_specs(cfg.tools)
    model = args.model or cfg.model.path
    if not model:
        raise ConfigError("no model: give --model DIR (or model.path in config=FILE)")
    if not os.path.exists(model):
        raise ConfigError(f"model directory not found: {model}")

    commands.evaluate(cfg, model, args.out, reuse_out=args.reuse_out)
    return 0


def cmd_score(args: argparse.Namespace, extra: list[str]) -> int:
    from ..evaluation import commands

    cfg = _eval_config(args, extra)
    commands.score(cfg, args.predictions, args.out, reuse_out=args.reuse_out)
    return 0


def cmd_eval_compare(args: argparse.Namespace, extra: list[str]) -> int:
    from ..evaluation.compare import compare_runs

    print(compare_runs(args.run_a, args.run_b, args.out, seed=args.seed))
    return 0


def _benchmark_names() -> str:
    from ..evaluation import list_benchmarks

    return ", ".join(list_benchmarks())


def _add_benchmark_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--benchmarks", help="eval.benchmarks: comma-separated names (eval --list shows them)")
    p.add_argument(
        "--benchmark-file",
        dest="benchmark_files",
        action="append",
        metavar="SPEC.yaml",
        help="eval.benchmark_files: a benchmark defined in YAML (docs/concepts/evaluation.md); repeatable",
    )
    p.add_argument(
        "--data",
        action="append",
        metavar="FILE",
        help="eval.data: a records file in the training format, evaluated as a benchmark with the "
        "training prompt (data.prompt_template, as validation renders it); repeatable",
    )
    p.add_argument(
        "--group-by",
        action="append",
        metavar="FIELD[,FIELD]",
        help="eval.group_by: record fields to break --data accuracy down by (besides problem_type)",
    )
    p.add_argument(
        "--annotations",
        help="eval.annotations: directory of the unified annotation files "
        "(default: $EASYVIDEOR1_ANNOTATIONS)",
    )


def add_parsers(sub) -> None:
    p = sub.add_parser(
        "eval",
        help="evaluate a model on video benchmarks (resumable); --list, --dry-run",
        description="Evaluate a model on video benchmarks. Flags are shortcuts for eval.* / data.* keys; "
        "config=FILE.yaml (the training run's config works) and key=value overrides follow the flags. "
        "Benchmarks: " + _benchmark_names(),
    )
    add_model_flag(p)
    _add_benchmark_flags(p)
    p.add_argument(
        "--video-root", help="eval.video_root: root of the benchmarks' videos (synthetic: the synth dir)"
    )
    p.add_argument("--out", help="output directory (required except with --list)")
    add_reuse_out_flag(p, "eval or score", "its results.json, report.html and benchmark folders")
    p.add_argument(
        "--list", action="store_true", help="list every benchmark: annotation file, metric, found?"
    )
    p.add_argument(
        "--dry-run", action="store_true", help="write OUT/B/prompts.jsonl; load no model, decode no video"
    )
    p.add_argument("--style", choices=["direct", "thinking"], help="eval.style (default direct)")
    p.add_argument("--preset", help="named settings, e.g. qwen3vl-official or greedy (flags override them)")
    p.add_argument(
        "--max-new-tokens",
        type=number_above_zero(int),
        help="eval.max_new_tokens (default: each benchmark's own)",
    )
    p.add_argument(
        "--batch-size",
        type=number_above_zero(int),
        help="eval.batch_size: HF engine samples per generate call",
    )
    p.add_argument(
        "--load-workers", type=number_above_zero(int), help="eval.load_workers: media loader processes"
    )
    p.add_argument(
        "--max-samples", type=number_above_zero(int), help="eval.max_samples: only the first N samples"
    )
    p.add_argument("--dtype", choices=["float32", "bfloat16", "auto"], help="eval.dtype (both engines)")
    p.add_argument(
        "--probe",
        choices=["blank", "shuffle"],
        help="eval.probe: video frames blanked (mid-grey) or shuffled in time, to measure how much the "
        "model uses the video; compare with the real run via eval-compare (use another --out)",
    )
    p.add_argument(
        "--tools",
        metavar="NAME[,NAME]",
        help="tools.names: tools the model may call (seek, zoom, frame_at, or tools.tool_files'); each "
        "sample is then an episode, its row records every turn and call (hf engine)",
    )
    g = p.add_argument_group("engine")
    g.add_argument(
        "--engine", choices=engine_names(), help="eval.engine: hf: batched generate (default); vllm: AsyncLLM"
    )
    g.add_argument("--max-in-flight", type=number_above_zero(int), help="vllm: requests submitted at once")
    add_vllm_engine_flags(g)
    add_sampling_flags(p, video_root=False)
    add_cache_flags(p)
    p.set_defaults(func=cmd_eval)

    p = sub.add_parser(
        "score",
        help="score responses made elsewhere (no model, no videos), exactly as eval scores",
        description="FILE is JSONL with sample_id (as in eval --dry-run's prompts.jsonl) and response; "
        "a sample missing from FILE counts as a failure. Benchmarks: " + _benchmark_names(),
    )
    _add_benchmark_flags(p)
    p.add_argument("--video-root", help="eval.video_root (only the synthetic benchmark reads it)")
    p.add_argument("--predictions", action="append", required=True, help="JSONL predictions file; repeatable")
    p.add_argument("--out", required=True)
    add_reuse_out_flag(p, "eval or score", "its results.json, report.html and benchmark folders")
    p.add_argument("--style", choices=["direct", "thinking"], help="eval.style the responses were made with")
    p.add_argument("--preset", help=argparse.SUPPRESS)
    p.add_argument("--max-samples", type=number_above_zero(int), help="eval.max_samples")
    p.set_defaults(func=cmd_score)

    p = sub.add_parser(
        "eval-compare",
        help="score deltas of two eval runs (per benchmark, per task, bootstrap CI) and a report "
        "of the samples whose verdict changed",
    )
    p.add_argument("run_a")
    p.add_argument("run_b")
    p.add_argument("--out", help="the comparison page (default: RUN_B/compare.html)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.set_defaults(func=cmd_eval_compare)
