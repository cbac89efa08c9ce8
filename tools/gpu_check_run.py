"""Run one ``easyvideor1`` command (``train`` under torchrun, or ``eval``) and record what only the
process itself can see: peak GPU memory (``torch.cuda.max_memory_allocated`` / ``_reserved``), peak
host memory, and which process group it joined (backend, world size).

``python tools/gpu_check_run.py STATS.json train config=run.yaml ...`` runs exactly what
``easyvideor1 train config=run.yaml ...`` runs (the CLI's ``main``), then writes STATS.json, also
when the command fails (with the error), so a crashed phase still reports its memory. For
``train`` it also times the checkpoint write (or skips it with ``GPU_CHECK_SKIP_SAVE=1``) and counts
the video loads served by the cache and decoded on the fly. The hooks only wrap a function and
call it; what runs is the CLI's own code.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
import traceback


def _watch_process_group(seen: dict) -> None:
    """Note the backend and world size when the trainer joins a process group (observes only)."""
    import torch.distributed as dist

    original = dist.init_process_group

    def recording(*args, **kwargs):
        result = original(*args, **kwargs)
        seen["backend"] = str(dist.get_backend())
        seen["world_size"] = dist.get_world_size()
        return result

    dist.init_process_group = recording


def _watch_checkpoint(seen: dict) -> None:
    """Time the trainer's checkpoint write; ``GPU_CHECK_SKIP_SAVE=1`` skips it (the kit measures it
    once, in the cache run, and spends the decode run's minutes on steps)."""
    from easyvideor1.trainer import loop

    original = loop.Trainer.save
    skip = os.environ.get("GPU_CHECK_SKIP_SAVE") == "1"

    def save(self) -> None:
        if skip:
            seen["checkpoint"] = "skipped (GPU_CHECK_SKIP_SAVE=1)"
            return
        t = time.perf_counter()
        original(self)
        seen.setdefault("checkpoint_seconds", []).append(round(time.perf_counter() - t, 2))

    loop.Trainer.save = save


def _watch_video_loads(seen: dict) -> list:
    """Keep every VideoLoader the trainer makes, to count at the end where its frames came from
    (``stats.hits``: cache entries, ``stats.decoded``: decoded on the fly)."""
    from easyvideor1.media import cache

    loaders: list = []
    original = cache.VideoLoader.__init__

    def init(self, *args, **kwargs) -> None:
        original(self, *args, **kwargs)
        loaders.append(self)

    cache.VideoLoader.__init__ = init
    return loaders


def _watch_first_update(seen: dict) -> None:
    """Around the trainer's first RL step (one optimizer step in the kit's runs): the share of the
    weights it changed, each compared in its own dtype, among those it had a gradient for
    (``easyvideor1.trainer.precision.changed_share``), and the attention implementation the model
    runs. Host copies of this rank's shards are taken before the step (observes only)."""
    from easyvideor1.trainer import loop
    from easyvideor1.trainer.precision import changed_share

    original = loop.Trainer.rl_step

    def local(t):
        return (t.to_local() if hasattr(t, "to_local") else t).detach()

    def rl_step(self):
        if "first_update" in seen:
            return original(self)
        model, opt = self.parts.model, self.parts.optimizer
        seen["attention_path"] = model.config._attn_implementation
        params = {n: p for n, p in model.named_parameters() if p.requires_grad}
        before = {n: local(p).to("cpu", copy=True) for n, p in params.items()}
        metrics = original(self)
        after = {n: local(p).to("cpu") for n, p in params.items()}
        moments = {
            n: local(opt.state[p]["exp_avg_sq"]).to("cpu") for n, p in params.items() if p in opt.state
        }
        seen["first_update"] = {
            **changed_share(before, after, moments),
            "master_dtypes": sorted({str(p.dtype) for p in params.values()}),
        }
        return metrics

    loop.Trainer.rl_step = rl_step


def _memory() -> dict:
    import torch

    out = {"peak_host_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out.update(
            device=torch.cuda.get_device_name(),
            max_memory_allocated_gib=round(torch.cuda.max_memory_allocated() / 2**30, 3),
            max_memory_reserved_gib=round(torch.cuda.max_memory_reserved() / 2**30, 3),
        )
    return out


def main(argv: list[str]) -> int:
    stats_path, command = argv[0], argv[1:]
    # a phase stopped at its limit gets SIGTERM: exit through ``finally`` so its stats are written
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    seen: dict = {"command": command[:1], "rank": int(os.environ.get("RANK", "0"))}
    _watch_process_group(seen)
    loaders: list = []
    if command[:1] == ["train"]:
        _watch_checkpoint(seen)
        _watch_first_update(seen)
        loaders = _watch_video_loads(seen)
    from easyvideor1.cli import main as cli_main

    t0 = time.perf_counter()
    rc = 1
    try:
        rc = cli_main(command)
    except BaseException as e:  # recorded, then re-raised: the phase log keeps the traceback
        seen["error"] = f"{type(e).__name__}: {e}"
        seen["traceback"] = traceback.format_exc()[-4000:]
        raise
    finally:
        seen.update(rc=rc, seconds=round(time.perf_counter() - t0, 2), **_memory())
        if loaders:
            seen["video_loads"] = {
                "from_cache": sum(loader.stats.hits for loader in loaders),
                "decoded": sum(loader.stats.decoded for loader in loaders),
            }
        if seen["rank"] == 0:
            with open(stats_path, "w", encoding="utf-8") as f:
                json.dump(seen, f, indent=1)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
