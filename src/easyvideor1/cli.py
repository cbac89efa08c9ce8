"""The ``easyvideor1`` command line (also ``python -m easyvideor1``).

Every command accepts ``config=FILE.yaml`` and dotted ``section.key=value`` overrides after its
flags; flags are shortcuts for the most used keys.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .config import ConfigError, RunConfig, load_config, split_overrides


def _shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--shard expects I/N, got {text!r}") from e
    if not (n >= 1 and 0 <= i < n):
        raise argparse.ArgumentTypeError(f"--shard I/N needs 0 <= I < N, got {text!r}")
    return i, n


def _family_choices(canonical: bool = False) -> list[str]:
    from .models.families import all_names, family_names

    return list(family_names() if canonical else all_names())


def _add_sampling_flags(p: argparse.ArgumentParser, video_root: bool = True) -> None:
    g = p.add_argument_group("frame sampling (data.* config keys)")
    g.add_argument(
        "--model-family",
        choices=_family_choices(),
        metavar="FAMILY",
        help=f"data.model_family: {', '.join(_family_choices(canonical=True))} (a model's config.json "
        "names its family; this checks it, or names it where no model is given)",
    )
    g.add_argument("--fps", type=float, help="data.video_fps")
    g.add_argument("--nframes", type=int, help="data.video_nframes (instead of --fps)")
    g.add_argument("--min-frames", type=int, help="data.video_min_frames")
    g.add_argument("--max-frames", type=int, help="data.video_max_frames")
    g.add_argument("--min-pixels", type=int, help="data.video_min_pixels")
    g.add_argument("--max-pixels", type=int, help="data.video_max_pixels")
    g.add_argument("--total-pixels", type=int, help="data.video_total_pixels")
    if video_root:
        g.add_argument("--video-root", help="data.video_root: base for relative video paths")


_FLAG_TO_KEY = {
    "model_family": "model_family",
    "fps": "video_fps",
    "nframes": "video_nframes",
    "min_frames": "video_min_frames",
    "max_frames": "video_max_frames",
    "min_pixels": "video_min_pixels",
    "max_pixels": "video_max_pixels",
    "total_pixels": "video_total_pixels",
    "video_root": "video_root",
}


def _run_config(args: argparse.Namespace, extra: list[str]) -> RunConfig:
    config_file, overrides, rest = split_overrides(extra)
    if rest:
        raise ConfigError(f"unrecognised arguments: {' '.join(rest)}")
    data = {
        key: getattr(args, flag)
        for flag, key in _FLAG_TO_KEY.items()
        if getattr(args, flag, None) is not None
    }
    if data.get("video_nframes") is not None:
        data["video_fps"] = None
    return load_config(RunConfig, config_file, overrides, values={"data": data} if data else None)


def _number_above_zero(kind: type):
    """An argparse type: a number of ``kind`` that must be > 0 (``--n -1`` once "wrote -1 videos")."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__}, got {text!r}") from e
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


def _frame_size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(x) for x in text.lower().split("x"))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT, e.g. 160x120, got {text!r}") from e
    if w < 16 or h < 16:
        raise argparse.ArgumentTypeError(f"WIDTH and HEIGHT must be >= 16, got {text!r}")
    return w, h


def cmd_synth(args: argparse.Namespace, extra: list[str]) -> int:
    from .data.synthetic import write_synthetic_set

    if extra:
        raise ConfigError(f"synth takes no key=value settings, got {' '.join(extra)}")
    w, h = args.size
    path = write_synthetic_set(args.out, args.n, seed=args.seed, size=(w, h), fps=args.fps, codec=args.codec)
    print(f"wrote {args.n} videos and {sum(1 for _ in open(path))} records to {path}")
    return 0


def cmd_preprocess(args: argparse.Namespace, extra: list[str]) -> int:
    from .data.preprocess import format_report, preprocess

    cfg = _run_config(args, extra)
    files = args.data or cfg.data.train_files + cfg.data.val_files
    if not files:
        raise ConfigError("no data files: give --data FILE (or data.train_files / data.val_files)")
    cache_dir = args.cache_dir or cfg.data.cache_dir
    if not cache_dir:
        raise ConfigError("no cache directory: give --cache-dir DIR (or data.cache_dir)")
    model = args.model
    if not model and cfg.model.path and os.path.isfile(os.path.join(cfg.model.path, "config.json")):
        model = cfg.model.path  # a recipe's model, where it is on this machine
    if model:  # the model's config.json names the family (a --model-family that disagrees is an error)
        cfg.data = cfg.data.with_model(model)
    elif cfg.data.model_family is None and all(os.path.isfile(f) for f in files):  # (file errors first)
        raise ConfigError(
            "preprocess needs the model family (it decides the frame size): give --model PATH "
            "(its config.json names it) or --model-family FAMILY"
        )
    report = preprocess(
        files, cfg.data, cache_dir, workers=args.workers, shard=args.shard, progress=not args.quiet
    )
    print(format_report(report))
    if report["failed"] or report["bad_records"]:
        print("some inputs failed; see failures.jsonl" + (" (--strict: exit 1)" if args.strict else ""))
        return 1 if args.strict else 0
    return 0


def cmd_demo(args: argparse.Namespace, extra: list[str]) -> int:
    from .demo import run_demo

    config_file, overrides, rest = split_overrides(extra)
    if rest or config_file:
        raise ConfigError(f"demo takes only key=value overrides, got {' '.join(rest or [config_file])}")
    if args.compare:
        run_demo(args.out, overrides, cold_start=True, family=args.family)
    result = run_demo(args.out, overrides, cold_start=args.cold_start, family=args.family)
    return 0 if result["accuracy_after"] is not None else 1


def cmd_train(args: argparse.Namespace, extra: list[str]) -> int:
    from .trainer.distributed import barrier, init_distributed
    from .trainer.loop import Trainer

    config_file, overrides, rest = split_overrides(extra)
    if rest:
        raise ConfigError(f"unrecognised arguments: {' '.join(rest)}")
    cfg = load_config(RunConfig, config_file, overrides)
    state = init_distributed(cfg.distributed)  # a no-op outside torchrun
    if cfg.demo.prepare:
        from .demo import prepare_demo_assets

        if not state.is_main:
            barrier()  # rank 0 writes the demo assets; the others then only find them
        prepare_demo_assets(cfg)
        if state.is_main:
            barrier()
    trainer = Trainer(cfg)
    final = trainer.train()
    if state.is_main:
        print(json.dumps({k: round(v, 4) for k, v in final.items() if k.count("/") == 1}))
    trainer.close()
    return 0


def cmd_make_tiny_model(args: argparse.Namespace, extra: list[str]) -> int:
    from .models.tiny import make_tiny_model

    make_tiny_model(args.out, args.family, seed=args.seed)
    print(f"wrote a tiny {args.family} model, tokenizer and processor to {args.out}")
    return 0


# eval/score flags -> eval.* config keys (flags win over config=FILE and over a preset)
_EVAL_FLAGS = (
    "benchmarks annotations style max_new_tokens batch_size load_workers max_samples dtype engine "
    "max_in_flight preset"
).split()


def _eval_config(args: argparse.Namespace, extra: list[str]) -> RunConfig:
    """The run config with eval flags applied. Order: defaults < config=FILE < preset < flags < key=value.

    A preset (``--preset`` or ``eval.preset``) sets the frame budget and sampling unless flags or
    overrides set them; ``--video-root`` is the benchmarks' root (``eval.video_root``)."""
    from .evaluation.presets import get_preset

    config_file, overrides, rest = split_overrides(extra)
    if rest:
        raise ConfigError(f"unrecognised arguments: {' '.join(rest)}")
    data = {
        key: getattr(args, flag)
        for flag, key in _FLAG_TO_KEY.items()
        if getattr(args, flag, None) is not None
    }
    data.pop("video_root", None)
    if data.get("video_nframes") is not None:
        data["video_fps"] = None
    settings = {f: getattr(args, f) for f in _EVAL_FLAGS if getattr(args, f, None) is not None}
    if "benchmarks" in settings:
        settings["benchmarks"] = settings["benchmarks"].split(",")
    for flag in ("data", "benchmark_files"):
        if getattr(args, flag, None):
            settings[flag] = list(getattr(args, flag))
    if getattr(args, "group_by", None):
        settings["group_by"] = [g.strip() for arg in args.group_by for g in arg.split(",") if g.strip()]
    for flag in ("cache_dir", "cache_mode"):  # where frames come from (data.*): not in the digest
        if getattr(args, flag, None) is not None:
            data[flag] = getattr(args, flag)
    if getattr(args, "video_root", None) is not None:
        settings["video_root"] = args.video_root
    preset_name = settings.get("preset") or load_config(RunConfig, config_file, overrides).eval.preset
    if preset_name:
        preset = get_preset(preset_name)
        data = {**preset["data"], **data}
        settings = {**preset["sampling"], **settings}
    return load_config(RunConfig, config_file, overrides, values={"data": data, "eval": settings})


def cmd_eval(args: argparse.Namespace, extra: list[str]) -> int:
    from .evaluation import commands

    cfg = _eval_config(args, extra)
    if args.list:
        print(commands.benchmark_table(cfg.eval))
        return 0
    if not args.out:
        raise ConfigError("--out DIR is required")
    if args.dry_run:
        commands.dry_run(cfg.eval, args.out)
        return 0
    model = args.model or cfg.model.path
    if not model:
        raise ConfigError("no model: give --model DIR (or model.path in config=FILE)")
    if not os.path.exists(model):
        raise ConfigError(f"model directory not found: {model}")

    def make_engine():
        import torch

        # on a CPU-only machine, leave the loader processes their cores
        if not torch.cuda.is_available():
            torch.set_num_threads(max(1, (os.cpu_count() or 2) - cfg.eval.load_workers))
        return _eval_engine(args, model, cfg.eval)

    commands.evaluate(cfg, model, args.out, make_engine)
    return 0


def cmd_score(args: argparse.Namespace, extra: list[str]) -> int:
    from .evaluation import commands

    cfg = _eval_config(args, extra)
    commands.score(cfg, args.predictions, args.out)
    return 0


def _eval_engine(args: argparse.Namespace, model: str, settings):
    """HF ``generate`` in batches, or vLLM ``AsyncLLM`` with one request per sample."""
    if settings.engine == "hf":
        import torch

        from .models.loading import load_policy
        from .rollout.hf import HFRolloutEngine

        policy, processor = load_policy(model, dtype=settings.dtype)
        policy.to("cuda" if torch.cuda.is_available() else "cpu").eval()
        return HFRolloutEngine(policy, processor), processor
    from transformers import AutoProcessor

    from .evaluation.engines import AsyncVLLMEvalEngine

    processor = AutoProcessor.from_pretrained(model)
    engine = AsyncVLLMEvalEngine(
        model,
        processor,
        dtype=settings.dtype,
        max_model_len=args.max_model_len,
        gpu_memory_utilization=args.gpu_memory_utilization,
        tensor_parallel_size=args.tensor_parallel_size,
        enforce_eager=args.enforce_eager,
        engine_kwargs={"data_parallel_size": args.data_parallel_size}
        if args.data_parallel_size > 1
        else None,
    )
    return engine, processor


def cmd_eval_compare(args: argparse.Namespace, extra: list[str]) -> int:
    from .evaluation.compare import compare_runs

    print(compare_runs(args.run_a, args.run_b, args.out, seed=args.seed))
    return 0


def _benchmark_names() -> str:
    from .evaluation import list_benchmarks

    return ", ".join(list_benchmarks())


def _add_benchmark_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--benchmarks", help="eval.benchmarks: comma-separated names (eval --list shows them)")
    p.add_argument(
        "--benchmark-file",
        dest="benchmark_files",
        action="append",
        metavar="SPEC.yaml",
        help="eval.benchmark_files: a benchmark defined in YAML (README: Evaluation); repeatable",
    )
    p.add_argument(
        "--data",
        action="append",
        metavar="FILE",
        help="eval.data: a records file in the training format, evaluated as a benchmark; repeatable",
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


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="easyvideor1", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("synth", help="write synthetic videos and records with ground truth")
    p.add_argument("--out", required=True, help="output directory (becomes the video root)")
    p.add_argument("--n", type=_number_above_zero(int), default=16, help="number of videos (> 0)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", type=_frame_size, default=(160, 120), help="WIDTHxHEIGHT (default 160x120)")
    p.add_argument("--fps", type=_number_above_zero(float), default=10.0)
    p.add_argument("--codec", default="h264", choices=["h264", "hevc", "vp9", "vp8", "mpeg4", "mjpeg"])
    p.set_defaults(func=cmd_synth)

    p = sub.add_parser("preprocess", help="decode the videos of data files once, into the frame cache")
    p.add_argument("--data", action="append", help="data file (JSON, JSONL, Parquet); repeatable")
    p.add_argument("--cache-dir", help="cache directory (data.cache_dir)")
    p.add_argument(
        "--workers", type=int, default=max(1, (__import__("os").cpu_count() or 2)), help="processes"
    )
    p.add_argument("--shard", type=_shard, help="I/N: process only this machine's share of the videos")
    p.add_argument("--strict", action="store_true", help="exit non-zero when any input failed")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--model", help="model directory whose config.json names the family (or --model-family)")
    _add_sampling_flags(p)
    p.set_defaults(func=cmd_preprocess)

    p = sub.add_parser("demo", help="the whole loop on a tiny model and synthetic videos (CPU, minutes)")
    p.add_argument("--out", default="runs/demo")
    p.add_argument("--cold-start", action="store_true", help="pure GRPO: no hybrid groups, no warm-up")
    p.add_argument("--compare", action="store_true", help="run the cold start too and plot both curves")
    p.add_argument(
        "--family",
        choices=_family_choices(),
        default="qwen3vl",
        metavar="FAMILY",
        help=f"tiny model family: {', '.join(_family_choices(canonical=True))} (default qwen3vl)",
    )
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("train", help="RL training: easyvideor1 train config=FILE.yaml key=value ...")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser(
        "eval",
        help="evaluate a model on video benchmarks (resumable); --list, --dry-run",
        description="Evaluate a model on video benchmarks. Flags are shortcuts for eval.* / data.* keys; "
        "config=FILE.yaml (the training run's config works) and key=value overrides follow the flags. "
        "Benchmarks: " + _benchmark_names(),
    )
    p.add_argument("--model", help="a Hugging Face model directory (default: model.path of config=FILE)")
    _add_benchmark_flags(p)
    p.add_argument(
        "--video-root", help="eval.video_root: root of the benchmarks' videos (synthetic: the synth dir)"
    )
    p.add_argument("--out", help="output directory (required except with --list)")
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
        type=_number_above_zero(int),
        help="eval.max_new_tokens (default: each benchmark's own)",
    )
    p.add_argument(
        "--batch-size",
        type=_number_above_zero(int),
        help="eval.batch_size: HF engine samples per generate call",
    )
    p.add_argument(
        "--load-workers", type=_number_above_zero(int), help="eval.load_workers: media loader processes"
    )
    p.add_argument(
        "--max-samples", type=_number_above_zero(int), help="eval.max_samples: only the first N samples"
    )
    p.add_argument("--dtype", choices=["float32", "bfloat16", "auto"], help="eval.dtype (both engines)")
    g = p.add_argument_group("engine")
    g.add_argument("--engine", choices=["hf", "vllm"], help="hf: batched generate (default); vllm: AsyncLLM")
    g.add_argument("--max-in-flight", type=_number_above_zero(int), help="vllm: requests submitted at once")
    g.add_argument(
        "--max-model-len", type=_number_above_zero(int), help="vllm: prompt + response token limit"
    )
    g.add_argument("--gpu-memory-utilization", type=float, default=0.9, help="vllm: share of GPU memory")
    g.add_argument(
        "--tensor-parallel-size", type=_number_above_zero(int), default=1, help="vllm: GPUs per engine copy"
    )
    g.add_argument("--enforce-eager", action="store_true", help="vllm: no compilation / CUDA graphs")
    g.add_argument(
        "--data-parallel-size",
        type=_number_above_zero(int),
        default=1,
        help="vllm: engine copies (GPUs = dp x tp)",
    )
    _add_sampling_flags(p, video_root=False)
    p.add_argument("--cache-dir", help="data.cache_dir: the frame cache `easyvideor1 preprocess` built")
    p.add_argument(
        "--cache-mode",
        choices=["prefer_cache", "cache_only", "decode_only"],
        help="data.cache_mode (cache_only: a cache miss is a failure, never a decode)",
    )
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
    p.add_argument("--style", choices=["direct", "thinking"], help="eval.style the responses were made with")
    p.add_argument("--preset", help=argparse.SUPPRESS)
    p.add_argument("--max-samples", type=_number_above_zero(int), help="eval.max_samples")
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

    p = sub.add_parser("make-tiny-model", help="a tiny random-weight Qwen-VL model built offline")
    p.add_argument(
        "--family",
        choices=_family_choices(),
        default="qwen3vl",
        metavar="FAMILY",
        help=f"one of {', '.join(_family_choices(canonical=True))} (default qwen3vl)",
    )
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_make_tiny_model)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["eval", "compare"]:  # `easyvideor1 eval compare RUN_A RUN_B`
        argv = ["eval-compare", *argv[2:]]
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    try:
        return args.func(args, extra)
    except ConfigError as e:
        print(f"easyvideor1 {args.command}: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as e:
        print(f"easyvideor1 {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
