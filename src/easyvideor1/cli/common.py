"""Flag helpers shared by the commands: frame-sampling flags (``data.*`` keys), number checks,
and the run config built from flags, ``config=FILE.yaml`` and dotted overrides."""

from __future__ import annotations

import argparse
import math

from ..config import ConfigError, RunConfig, load_config, split_overrides


def shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"--shard expects I/N, got {text!r}") from e
    if not (n >= 1 and 0 <= i < n):
        raise argparse.ArgumentTypeError(f"--shard I/N needs 0 <= I < N, got {text!r}")
    return i, n


def family_choices() -> list[str]:
    """The registered families' ``model_type`` names (what ``--help`` lists)."""
    from ..models.families import family_names

    return list(family_names())


def family_arg(text: str) -> str:
    """A ``--family`` / ``--model-family`` value: any spelling the family registry accepts
    (``qwen3.5``, ``GLM-4.1V``), kept as written; an unknown one is refused with the known names."""
    from ..models.families import UnknownFamilyError, get_family

    try:
        get_family(text)
    except UnknownFamilyError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def add_sampling_flags(p: argparse.ArgumentParser, video_root: bool = True) -> None:
    g = p.add_argument_group("frame sampling (data.* config keys)")
    g.add_argument(
        "--model-family",
        type=family_arg,
        metavar="FAMILY",
        help=f"data.model_family: {', '.join(family_choices())} (a model's config.json "
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


FLAG_TO_KEY = {
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


def data_values(args: argparse.Namespace) -> dict:
    """The ``data.*`` values the frame-sampling flags set. ``--fps`` and ``--nframes`` are one choice
    (a rate or a fixed count): together they are an error; either one replaces the other's key set
    by ``config=FILE`` or a preset."""
    if getattr(args, "fps", None) is not None and getattr(args, "nframes", None) is not None:
        raise ConfigError(
            f"--fps {args.fps} and --nframes {args.nframes} are exclusive (a frame rate or a fixed "
            "frame count): give one"
        )
    data = {
        key: getattr(args, flag) for flag, key in FLAG_TO_KEY.items() if getattr(args, flag, None) is not None
    }
    if data.get("video_nframes") is not None:
        data["video_fps"] = None
    if data.get("video_fps") is not None:
        data["video_nframes"] = None
    return data


def split_extra(extra: list[str]) -> tuple[str | None, list[str]]:
    """``config=FILE`` and ``key=value`` overrides; anything else is an error."""
    config_file, overrides, rest = split_overrides(extra)
    if rest:
        raise ConfigError(f"unrecognised arguments: {' '.join(rest)}")
    return config_file, overrides


def run_config(args: argparse.Namespace, extra: list[str], values: dict | None = None) -> RunConfig:
    """The run config of a command: defaults < ``config=FILE`` < the flags (the frame-sampling
    flags' ``data.*`` keys, and ``values``: other flags' keys by section) < ``key=value``."""
    config_file, overrides = split_extra(extra)
    flags = {"data": data_values(args)}
    for section, keys in (values or {}).items():
        flags[section] = {**flags.get(section, {}), **keys}
    return load_config(RunConfig, config_file, overrides, values=flags)


def number_above_zero(kind: type):
    """An argparse type: a number of ``kind`` that must be > 0 (``--n -1`` once "wrote -1 videos")."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__}, got {text!r}") from e
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


# the largest frame side a command accepts: 8K video
MAX_FRAME_SIDE = 8192


def frame_size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(x) for x in text.lower().split("x"))
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT, e.g. 160x120, got {text!r}") from e
    if w < 16 or h < 16:
        raise argparse.ArgumentTypeError(f"WIDTH and HEIGHT must be >= 16, got {text!r}")
    if w > MAX_FRAME_SIDE or h > MAX_FRAME_SIDE:
        raise argparse.ArgumentTypeError(
            f"WIDTH and HEIGHT must be <= {MAX_FRAME_SIDE} (8K video; a larger frame takes gigabytes "
            f"before it is encoded), got {text!r}"
        )
    return w, h


def add_vllm_engine_flags(group) -> None:
    """The vLLM engine's flags (``eval`` and ``filter``): shortcuts for ``rollout.vllm.*`` keys
    (:func:`flag_values`)."""
    group.add_argument(
        "--max-model-len",
        type=number_above_zero(int),
        help="rollout.vllm.max_model_len: prompt + response limit",
    )
    group.add_argument(
        "--gpu-memory-utilization", type=float, help="rollout.vllm.gpu_memory_utilization (default 0.9 alone)"
    )
    group.add_argument(
        "--cpu-kv-cache-gib",
        help="rollout.vllm.cpu_kv_cache_gib: vLLM's KV cache on CPUs, in GiB or auto (the default)",
    )
    group.add_argument(
        "--tensor-parallel-size", type=number_above_zero(int), help="rollout.vllm.tensor_parallel_size"
    )
    group.add_argument("--enforce-eager", action="store_true", help="rollout.vllm.enforce_eager")
    group.add_argument(
        "--data-parallel-size",
        type=number_above_zero(int),
        help="rollout.vllm.data_parallel_size: engine copies (GPUs = dp x tp)",
    )


_VLLM_FLAGS = (
    "max_model_len",
    "gpu_memory_utilization",
    "cpu_kv_cache_gib",
    "tensor_parallel_size",
    "enforce_eager",
    "data_parallel_size",
)


def flag_values(args: argparse.Namespace) -> dict[str, dict]:
    """The keys, by section, that the vLLM engine flags and the frame-source flags (``--cache-dir``,
    ``--cache-mode``) of ``eval`` and ``filter`` set: values the config is built with (flags win
    over ``config=``), never set on a built config."""
    vllm = {key: getattr(args, key) for key in _VLLM_FLAGS if getattr(args, key, None) not in (None, False)}
    data = {
        key: getattr(args, key) for key in ("cache_dir", "cache_mode") if getattr(args, key, None) is not None
    }
    return {"data": data, "rollout": {"vllm": vllm}}


def add_model_flag(parser) -> None:
    """``--model``: the checkpoint a job runs (``eval``, ``filter``), else the config's ``model.path``."""
    parser.add_argument("--model", help="a Hugging Face model directory (default: model.path of config=FILE)")


def add_reuse_out_flag(parser, commands: str, replaced: str) -> None:
    """``--reuse-out``: write into a non-empty ``--out`` that no earlier run of ``commands`` wrote
    (``outdir.Reuse``), whose files of the command's names (``replaced``) are then replaced."""
    parser.add_argument(
        "--reuse-out",
        action="store_true",
        help=f"write into a non-empty --out that no {commands} run wrote ({replaced} are replaced); "
        "refused without it",
    )


def add_cache_flags(parser) -> None:
    """Where a command reads frames from: the cache directory and mode (``eval`` and ``filter``)."""
    parser.add_argument("--cache-dir", help="data.cache_dir: the frame cache `easyvideor1 preprocess` built")
    parser.add_argument(
        "--cache-mode",
        choices=["prefer_cache", "cache_only", "decode_only"],
        help="data.cache_mode (cache_only: a cache miss is a failure, never a decode)",
    )
