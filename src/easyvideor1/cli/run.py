"""``synth``, ``preprocess``, ``demo``, ``train`` and ``make-tiny-model``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from contextlib import nullcontext

from ..config import ConfigError, RunConfig, load_config, split_overrides
from ..outdir import check_writable, hold
from ..resolve import resolve_config
from .common import (
    add_sampling_flags,
    family_arg,
    family_choices,
    frame_size,
    number_above_zero,
    run_config,
    shard,
)


def cmd_synth(args: argparse.Namespace, extra: list[str]) -> int:
    from ..data.synthetic import MAX_FPS, write_synthetic_set

    if extra:
        raise ConfigError(f"synth takes no key=value settings, got {' '.join(extra)}")
    if args.fps > MAX_FPS:  # frames are drawn one by one: a huge rate ran for minutes, silently
        raise ConfigError(
            f"--fps must be <= {MAX_FPS:g} (synthetic frames are drawn one by one), got {args.fps:g}"
        )
    w, h = args.size
    check_writable(args.out, "--out")
    path = write_synthetic_set(args.out, args.n, seed=args.seed, size=(w, h), fps=args.fps, codec=args.codec)
    print(f"wrote {args.n} videos and {sum(1 for _ in open(path))} records to {path}")
    return 0


def cmd_preprocess(args: argparse.Namespace, extra: list[str]) -> int:
    from ..data.preprocess import format_report, preprocess

    cfg = run_config(args, extra)
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
        cfg = resolve_config(cfg, model)
    elif cfg.data.model_family is None and all(os.path.isfile(f) for f in files):  # (file errors first)
        raise ConfigError(
            "preprocess needs the model family (it decides the frame size): give --model PATH "
            "(its config.json names it) or --model-family FAMILY"
        )
    tracks = []
    if cfg.tools.enabled:  # the frames the configured tools will read (tools/tracks.py)
        from ..tools.session import tool_tracks

        tracks = tool_tracks(cfg.tools, cfg.data.model_family or _family_needed())
    report = preprocess(
        files,
        cfg.data,
        cache_dir,
        workers=args.workers or max(1, os.cpu_count() or 2),
        shard=args.shard,
        progress=not args.quiet,
        tracks=tracks,
    )
    print(format_report(report))
    if report["failed"] or report["bad_records"]:
        print("some inputs failed; see failures.jsonl" + (" (--strict: exit 1)" if args.strict else ""))
        return 1 if args.strict else 0
    return 0


def _family_needed() -> str:
    raise ConfigError(
        "the tools' frame tracks need the model family: give --model PATH or --model-family FAMILY"
    )


def cmd_demo(args: argparse.Namespace, extra: list[str]) -> int:
    from ..demo import run_demo

    config_file, overrides, rest = split_overrides(extra)
    if rest or config_file:
        raise ConfigError(f"demo takes only key=value overrides, got {' '.join(rest or [config_file])}")
    if args.distill:
        from ..demo import run_distill_demo

        if args.tools or args.cold_start or args.compare or args.family != "qwen3vl":
            raise ConfigError(
                "demo --distill trains its own teacher and cold-start students on the tiny Qwen3-VL "
                "(no --tools, --cold-start, --compare, --family)"
            )
        result = run_distill_demo(args.out or "runs/demo_distill", overrides)
        return 0 if result["methods"]["opd"]["accuracy_after"] is not None else 1
    if args.tools:
        from ..demo import run_tool_demo

        if args.cold_start or args.compare or args.family != "qwen3vl":
            raise ConfigError(
                "demo --tools runs the tiny Qwen3-VL with its warm-up (no --cold-start, --compare, --family)"
            )
        result = run_tool_demo(args.out or "runs/demo_tools", overrides)
        return 0 if result["accuracy_with_tools"] is not None else 1
    if args.compare:
        run_demo(args.out or "runs/demo", overrides, cold_start=True, family=args.family)
    result = run_demo(args.out or "runs/demo", overrides, cold_start=args.cold_start, family=args.family)
    return 0 if result["accuracy_after"] is not None else 1


def cmd_train(args: argparse.Namespace, extra: list[str]) -> int:
    from ..trainer.distributed import barrier, init_distributed
    from ..trainer.loop import Trainer

    config_file, overrides, rest = split_overrides(extra)
    if rest:
        raise ConfigError(f"unrecognised arguments: {' '.join(rest)}")
    cfg = load_config(RunConfig, config_file, overrides)
    state = init_distributed(cfg.distributed)  # a no-op outside torchrun
    # rank 0 holds the run directory for all ranks (if it stops here, torchrun stops the others)
    held = hold(cfg.trainer.output_dir, "trainer.output_dir", "train") if state.is_main else nullcontext()
    with held:
        if cfg.demo.prepare:
            from ..demo import prepare_demo_assets

            if not state.is_main:
                barrier()  # rank 0 writes the demo assets; the others then only find them
            cfg = prepare_demo_assets(cfg)
            if state.is_main:
                barrier()
        trainer = Trainer(cfg)
        final = trainer.train()
        if state.is_main:
            print(json.dumps({k: round(v, 4) for k, v in final.items() if k.count("/") == 1}))
        trainer.close()
    return 0


def cmd_make_tiny_model(args: argparse.Namespace, extra: list[str]) -> int:
    from ..models.tiny import make_tiny_model

    make_tiny_model(args.out, args.family, seed=args.seed)
    print(f"wrote a tiny {args.family} model, tokenizer and processor to {args.out}")
    return 0


def cmd_serve(args: argparse.Namespace, extra: list[str]) -> int:
    from ..rollout.server import API_KEY_ENV, exposure_warning, load_server

    if extra:
        raise ConfigError(f"serve takes flags only, got {' '.join(extra)}")
    api_key = args.api_key or os.environ.get(API_KEY_ENV) or None
    warning = exposure_warning(args.host, api_key)
    if warning:
        print(f"serve: warning: {warning}", file=sys.stderr, flush=True)
    server = load_server(args.model, args.name, args.host, args.port, args.dtype, api_key, args.read_timeout)
    # the line a caller (a test, a script) waits for before sending requests
    print(f"serving {server.name} on {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


def add_parsers(sub) -> None:
    p = sub.add_parser("synth", help="write synthetic videos and records with ground truth")
    p.add_argument("--out", required=True, help="output directory (becomes the video root)")
    p.add_argument("--n", type=number_above_zero(int), default=16, help="number of videos (> 0)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--size", type=frame_size, default=(160, 120), help="WIDTHxHEIGHT (default 160x120)")
    p.add_argument("--fps", type=number_above_zero(float), default=10.0, help="frame rate (default 10)")
    p.add_argument("--codec", default="h264", choices=["h264", "hevc", "vp9", "vp8", "mpeg4", "mjpeg"])
    p.set_defaults(func=cmd_synth)

    p = sub.add_parser("preprocess", help="decode the videos of data files once, into the frame cache")
    p.add_argument("--data", action="append", help="data file (JSON, JSONL, Parquet); repeatable")
    p.add_argument("--cache-dir", help="cache directory (data.cache_dir)")
    p.add_argument(
        "--workers",
        type=number_above_zero(int),
        default=None,  # one per core, decided when it runs (not when the parser is built)
        help="decoding processes, >= 1 (default: one per core)",
    )
    p.add_argument("--shard", type=shard, help="I/N: process only this machine's share of the videos")
    p.add_argument("--strict", action="store_true", help="exit non-zero when any input failed")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument("--model", help="model directory whose config.json names the family (or --model-family)")
    add_sampling_flags(p)
    p.set_defaults(func=cmd_preprocess)

    p = sub.add_parser("demo", help="the whole loop on a tiny model and synthetic videos (CPU, minutes)")
    p.add_argument(
        "--out",
        default=None,
        help="output directory (runs/demo; --tools: runs/demo_tools, --distill: runs/demo_distill)",
    )
    p.add_argument(
        "--tools", action="store_true", help="the tool demo: a window the first view misses, found with seek"
    )
    p.add_argument(
        "--distill",
        action="store_true",
        help="a fresh student three ways: GRPO, on-policy distillation from a trained teacher, RLSD",
    )
    p.add_argument("--cold-start", action="store_true", help="pure GRPO: no hybrid groups, no warm-up")
    p.add_argument("--compare", action="store_true", help="run the cold start too and plot both curves")
    _add_family_flag(p, "tiny model family: ")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("train", help="RL training: easyvideor1 train config=FILE.yaml key=value ...")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser(
        "serve", help="an OpenAI-compatible chat-completions server over a model (a judge for CPU runs)"
    )
    p.add_argument("--model", required=True, help="Hugging Face model directory")
    p.add_argument("--name", default="", help="the model name clients send (default: the directory's name)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument(
        "--api-key",
        default=None,
        help="require Authorization: Bearer KEY (default: the EASYVIDEOR1_SERVE_API_KEY environment variable, "
        "which keeps the key out of the process list)",
    )
    p.add_argument(
        "--read-timeout",
        type=number_above_zero(float),
        default=None,  # the server's own default
        help="seconds a connection may stay silent while a request is read (default 60)",
    )
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser(
        "make-tiny-model", help="a tiny random-weight model of a registered family, built offline"
    )
    _add_family_flag(p, "one of ")
    p.add_argument("--out", required=True)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_make_tiny_model)


def _add_family_flag(p, lead: str) -> None:
    """``--family`` of the tiny model (``demo``, ``make-tiny-model``): any registered family name."""
    p.add_argument(
        "--family",
        type=family_arg,
        default="qwen3vl",
        metavar="FAMILY",
        help=f"{lead}{', '.join(family_choices())} (default qwen3vl)",
    )
