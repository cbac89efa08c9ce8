"""The KV-cache size of vLLM on CPUs (``rollout.vllm.cpu_kv_cache_gib``).

Without ``VLLM_CPU_KVCACHE_SPACE``, vLLM-CPU reserves ``gpu_memory_utilization`` of the machine's
*total* memory for each engine (0.5 beside a trainer, 0.9 alone): two ranks' engines ask for all of
it and are OOM-killed. So on CPUs every engine gets an explicit size (vLLM's
``kv_cache_memory_bytes``), set before it starts: ``auto`` takes a quarter of the memory available
now, shared by the engines on this machine (ranks x data-parallel copies x tensor-parallel
workers), within [0.5, 16] GiB; a number is taken as given, refused when the engines together
cannot fit in the available memory. ``VLLM_CPU_KVCACHE_SPACE`` set by the user wins (vLLM reads it
itself) and is reported. Each engine prints what it chose. On GPUs nothing here applies
(``gpu_memory_utilization`` sizes the cache there).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError

KEY = "rollout.vllm.cpu_kv_cache_gib"
ENV = "VLLM_CPU_KVCACHE_SPACE"  # vLLM's own variable (whole GiB); set by the user, it wins
AUTO = "auto"
# the rest of the available memory holds the engines' weights and activations and the trainers'
AUTO_SHARE = 0.25
AUTO_FLOOR_GIB = 0.5  # below this an engine holds too few tokens to be worth starting
AUTO_CAP_GIB = 16.0  # CPU rollouts are short and few: more only slows the cache's allocation
AUTO_STEP_GIB = 0.25  # auto sizes are rounded down to it (readable in the log line)
GIB = 1024**3


def parse_setting(value: object) -> float | None:
    """``rollout.vllm.cpu_kv_cache_gib`` as a size in GiB, or None for ``auto``; refuses anything
    else naming the key (the YAML value arrives as text)."""
    if str(value).strip().lower() == AUTO:
        return None
    try:
        gib = float(str(value))
    except ValueError:
        gib = math.nan
    if not (math.isfinite(gib) and gib > 0):
        raise ConfigError(f"{KEY} must be 'auto' or a size in GiB > 0, got {value!r}")
    return gib


def auto_gib(available_bytes: int, engines: int) -> float:
    """``auto``'s size per engine: ``AUTO_SHARE`` of the available memory split between the
    ``engines`` on this machine, rounded down to ``AUTO_STEP_GIB``, within the floor and cap."""
    share = AUTO_SHARE * available_bytes / GIB / max(engines, 1)
    stepped = math.floor(share / AUTO_STEP_GIB) * AUTO_STEP_GIB
    return min(AUTO_CAP_GIB, max(AUTO_FLOOR_GIB, stepped))


@dataclass(frozen=True)
class KVCacheSize:
    """What one engine's KV cache gets: ``gib``, why (``reason``), and whether the user's
    ``VLLM_CPU_KVCACHE_SPACE`` decided it (vLLM then reads the variable itself)."""

    gib: float
    reason: str
    from_env: bool = False

    @property
    def bytes(self) -> int:
        return int(self.gib * GIB)

    def line(self) -> str:
        return f"vLLM on CPU: KV cache {self.gib:g} GiB ({self.reason})"


def kv_cache_size(setting: object, env: Mapping[str, str], available_bytes: int, engines: int) -> KVCacheSize:
    """The size an engine's KV cache gets (see the module doc): the user's ``VLLM_CPU_KVCACHE_SPACE``
    in ``env``, else ``setting``; a size that cannot fit ``engines`` times in ``available_bytes``
    is refused naming the key."""
    raw = env.get(ENV, "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise ConfigError(f"{ENV} must be a whole number of GiB >= 1 (vLLM reads it so), got {raw!r}")
        return KVCacheSize(
            float(raw), f"{ENV}={raw} set in the environment, which wins over {KEY}", from_env=True
        )
    gib = parse_setting(setting)
    available = available_bytes / GIB
    if gib is None:
        ranks = f"{engines} rank{'s' * (engines != 1)}"
        size = KVCacheSize(
            auto_gib(available_bytes, engines), f"auto: {available:.1f} GiB available, {ranks}"
        )
    else:
        size = KVCacheSize(gib, KEY)
    if size.gib * engines > available:
        raise ConfigError(
            f"{KEY}={setting}: {engines} vLLM engine(s) on this machine need {size.gib * engines:g} GiB of KV "
            f"cache, but only {available:.1f} GiB of memory is available; set a smaller size"
        )
    return size


def engine_kv_cache_args(setting: object, tensor_parallel_size: int = 1, data_parallel_size: int = 1) -> dict:
    """The vLLM engine argument that sizes a CPU engine's KV cache (none where the user's
    ``VLLM_CPU_KVCACHE_SPACE`` decides: vLLM reads it), after printing the choice as one line."""
    engines = engines_on_this_machine(tensor_parallel_size, data_parallel_size)
    size = kv_cache_size(setting, os.environ, available_memory_bytes(), engines)
    print(size.line(), file=sys.stderr, flush=True)
    return {} if size.from_env else {"kv_cache_memory_bytes": size.bytes}


def engines_on_this_machine(tensor_parallel_size: int = 1, data_parallel_size: int = 1) -> int:
    """vLLM workers on this machine that each hold a KV cache: the node's ranks (torchrun's
    ``LOCAL_WORLD_SIZE``) times the engine's data-parallel copies and tensor-parallel workers."""
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    return max(ranks, 1) * max(data_parallel_size, 1) * max(tensor_parallel_size, 1)


def available_memory_bytes() -> int:
    """Memory this process can still take: the kernel's ``MemAvailable``, or less where a cgroup
    (a container's limit) leaves less."""
    available = _meminfo_available()
    limit = _cgroup_room()
    return min(available, limit) if limit is not None else available


def _meminfo_available() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _cgroup_room() -> int | None:
    """The cgroup's limit minus its usage (v2, then v1); None without a limit."""
    for limit_file, usage_file in (
        ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
        ("/sys/fs/cgroup/memory/memory.limit_in_bytes", "/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ):
        try:
            limit, usage = Path(limit_file).read_text().strip(), Path(usage_file).read_text().strip()
        except OSError:
            continue
        if limit.isdigit() and usage.isdigit() and int(limit) < 1 << 60:  # v1's "no limit" is ~2^63
            return max(int(limit) - int(usage), 0)
        return None
    return None
