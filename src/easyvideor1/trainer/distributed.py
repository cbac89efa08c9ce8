"""Data-parallel training under ``torchrun``: the process group, FSDP2 sharding and the few collectives.

``easyvideor1 train`` runs unchanged as one process or under ``torchrun`` (one or many nodes):
:func:`init_distributed` reads torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``) and
joins the process group (NCCL on GPUs, gloo on CPUs). How the work is split, and why:

- Prompts are sharded over ranks and a prompt's whole group stays on one rank, so group advantages
  need no communication; estimators with batch-wide statistics get the gathered scores instead
  (they are small), so every estimator gives the single-process answer.
- Rollouts never run through the sharded model: each rank generates with its own full copy (an HF
  model or a vLLM engine), refreshed from the trainer after every optimizer step. Generation then
  needs no collective at all, ranks may produce different lengths, and there is no per-token
  all-gather. The ranks of a sequence-parallel group train on the same samples: each generates
  and scores a share of them and the shares are gathered (:func:`split_over_group`).
- Every FSDP forward is a collective. Ranks therefore run the same number of micro-batches
  (:func:`max_over_ranks`; a rank with fewer runs zero-weighted ones) and the same vision-tower
  calls (``models.vision.DummyVisionPass``).
"""

from __future__ import annotations

import datetime
import gc
import logging
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from ..errors import ConfigError

# the section's settings live with the other sections (torch-free: reading a config loads no torch);
# importing DistributedConfig from here keeps working
from .config import DistributedConfig

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class DistState:
    """Where this process stands: ``rank`` of ``world`` (1 without torchrun), and its device."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    grouped: bool = False  # in a process group although alone (distributed.group_with_one_rank)
    sp_size: int = 1  # ranks per sequence-parallel group (distributed.sequence_parallel_size)
    sp_group: Any = None  # this rank's sequence-parallel process group (None: sp_size 1)

    @property
    def enabled(self) -> bool:
        return self.world > 1 or self.grouped

    @property
    def data_rank(self) -> int:
        """This rank's index among the data-parallel groups (the ranks of a sequence-parallel
        group hold the same samples): what splits batches."""
        return self.rank // self.sp_size

    @property
    def data_world(self) -> int:
        """How many different shares of each batch there are."""
        return self.world // self.sp_size

    @property
    def sp(self):
        """This rank's :class:`~easyvideor1.models.sequence_parallel.SPGroup`, or None."""
        from ..models.sequence_parallel import SPGroup

        return SPGroup(self.sp_group, self.sp_size, self.rank % self.sp_size) if self.sp_size > 1 else None

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_distributed(cfg: DistributedConfig | None = None) -> DistState:
    """Join torchrun's process group if there is one; a plain ``python`` run stays single-process."""
    cfg = cfg or DistributedConfig()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    launched = "MASTER_ADDR" in os.environ and "RANK" in os.environ  # torchrun's rendezvous is there
    alone_in_group = world == 1 and cfg.group_with_one_rank and launched
    if world <= 1 and not alone_in_group:
        return DistState(device=device)
    if not dist.is_initialized():
        backend = cfg.backend if cfg.backend != "auto" else ("nccl" if cuda else "gloo")
        dist.init_process_group(backend, timeout=datetime.timedelta(minutes=cfg.timeout_minutes))
    state = DistState(dist.get_rank(), dist.get_world_size(), local_rank, device, grouped=alone_in_group)
    if cfg.sequence_parallel_size > 1:
        state.sp_size, state.sp_group = (
            cfg.sequence_parallel_size,
            _sequence_parallel_groups(state.rank, world, cfg),
        )
    return state


def _sequence_parallel_groups(rank: int, world: int, cfg: DistributedConfig):
    """Every k consecutive ranks form a sequence-parallel group; the ranks at the same place in
    each form a data-parallel group, which the collectives below use from then on (each share of
    a batch is counted once). Every rank creates every group, in the same order. Returns this
    rank's sequence-parallel group."""
    global _data_group
    k = cfg.sequence_parallel_size
    if world % k:
        raise ConfigError(f"distributed.sequence_parallel_size={k} must divide the number of ranks ({world})")
    mine = None
    for g in range(world // k):
        group = dist.new_group(list(range(g * k, (g + 1) * k)))
        if rank // k == g:
            mine = group
    for s in range(k):
        group = dist.new_group(list(range(s, world, k)))
        if rank % k == s:
            _data_group = group
    return mine


def shutdown_distributed(*objects_to_free: Any) -> None:
    """Leave the process group cleanly.

    Destroying a gloo group while models and pending work objects are alive can deadlock the
    interpreter's exit, so the caller drops its references, we collect, meet at a barrier, and only
    then destroy the group.
    """
    global _data_group
    del objects_to_free
    _data_group = None
    gc.collect()
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def decoder_layers(model) -> list[torch.nn.Module]:
    """The blocks FSDP shards one by one, as the model family's adapter says: the modules of the
    model's ``_no_split_modules`` classes (decoder layers of every kind, vision blocks)."""
    from ..models.families import family_of_model

    return family_of_model(model).engine.shard_modules(model)


def shard_model(model: torch.nn.Module, cfg: DistributedConfig, state: DistState) -> torch.nn.Module:
    """FSDP2: ``fully_shard`` each decoder layer and vision block, then the root (in place)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    from ..models.loading import DTYPES

    # the sharded parameters (the optimizer's masters) keep the model's dtype; the all-gathered
    # copies compute in param_dtype; gradients are reduced in reduce_dtype whatever param_dtype is
    mp = MixedPrecisionPolicy(
        param_dtype=DTYPES[cfg.param_dtype] if cfg.param_dtype else None,
        reduce_dtype=DTYPES[cfg.reduce_dtype],
    )
    offload: OffloadPolicy = OffloadPolicy()
    if cfg.cpu_offload:
        if state.device.type != "cuda":
            log.warning("distributed.cpu_offload ignored: parameters already live in CPU memory")
        else:
            from ..models.inputs import COMPUTE_DEVICE_ATTR

            offload = CPUOffloadPolicy()
            setattr(model, COMPUTE_DEVICE_ATTR, state.device)  # inputs go to the GPU, not the shards' CPU
    if state.device.type == "cuda" and not cfg.cpu_offload:
        model.to(state.device)
    kwargs = {"mp_policy": mp, "offload_policy": offload, "reshard_after_forward": cfg.reshard_after_forward}
    for layer in decoder_layers(model):
        fully_shard(layer, **kwargs)
    fully_shard(model, **kwargs)
    return model


def full_weights(model: torch.nn.Module) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, full tensor)`` for every entry of the state dict, one at a time.

    With FSDP2 each entry is all-gathered as it is reached (a collective: every rank must consume
    the iterator to the end, in step), so peak extra memory is one tensor, which is what a
    rollout engine's layer-wise reload wants. Names are Hugging Face's.
    """
    for name, value in model.state_dict().items():
        full = value.full_tensor() if hasattr(value, "full_tensor") else value
        yield name, full.detach()


# the process group this thread's collectives use (None: the default group). Rollouts generated
# ahead (``ahead.py``) run theirs on a group of their own: two threads issuing collectives on one
# group would pair one rank's update with another rank's rollout round
_thread = threading.local()
# with sequence parallelism: the data-parallel group of this rank (else None: every rank)
_data_group = None


def new_thread_group():
    """A gloo process group for another thread's collectives (every rank creates it, in step), or
    None without torchrun. Gloo, also on GPUs: NCCL communicators driven from two threads at once
    can deadlock, and these collectives carry a few small objects."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.new_group(backend="gloo")


@contextmanager
def collectives_on(group):
    """Within the block, this thread's collectives (the helpers below) use ``group``."""
    before = getattr(_thread, "group", None)
    _thread.group = group
    try:
        yield
    finally:
        _thread.group = before


def _group():
    return getattr(_thread, "group", None) or _data_group


def data_group():
    """The process group whose ranks hold different data (None: every rank)."""
    return _group()


def max_over_ranks(value: int) -> int:
    if not (dist.is_available() and dist.is_initialized()):
        return value
    t = torch.tensor([value], dtype=torch.int64, device=_comm_device(_group()))
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=_group())
    return int(t.item())


def sum_over_ranks(values: dict[str, float]) -> dict[str, float]:
    """Element-wise sum of a metrics dict over ranks (keys missing on a rank count as 0)."""
    return {k: total for k, (total, _) in _totals(values).items()}


def reduce_over_ranks(values: dict[str, float], summed: tuple[str, ...] = ()) -> dict[str, float]:
    """Keys in ``summed`` totalled over ranks, the others averaged over the ranks that report them
    (per-task keys may be missing on some)."""
    return {k: total if k in summed else total / n for k, (total, n) in _totals(values).items()}


def _totals(values: dict[str, float]) -> dict[str, tuple[float, float]]:
    """``key -> (sum over ranks, number of ranks reporting it)`` in one all-reduce.

    A collective: every rank calls it, with or without values."""
    if not (dist.is_available() and dist.is_initialized()):
        return {k: (float(v), 1.0) for k, v in values.items()}
    keys = sorted(all_gather_union(list(values)))
    if not keys:
        return {}
    t = torch.tensor(
        [[float(values.get(k, 0.0)) for k in keys], [float(k in values) for k in keys]],
        dtype=torch.float64,
        device=_comm_device(_group()),
    )
    dist.all_reduce(t, group=_group())
    return {k: (float(t[0, i]), float(t[1, i])) for i, k in enumerate(keys)}


def all_gather_union(items: list[str]) -> set[str]:
    return {x for part in all_gather(items) for x in part}


def all_gather(obj: Any) -> list[Any]:
    """Every rank's ``obj`` (JSON-like Python values), in rank order; ``[obj]`` without a group."""
    if not (dist.is_available() and dist.is_initialized()):
        return [obj]
    out: list[Any] = [None] * dist.get_world_size(_group())
    dist.all_gather_object(out, obj, group=_group())
    return out


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _comm_device(group=None) -> torch.device:
    """Where a tensor for a collective on ``group`` must live (NCCL: the current GPU)."""
    if dist.get_backend(group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def group_shares(count: int, state: DistState) -> list[range]:
    """Each rank's contiguous share of ``count`` prompts split over a sequence-parallel group, in
    group order (the later ranks take one more when the size does not divide ``count``)."""
    k = state.sp_size
    return [range(count * r // k, count * (r + 1) // k) for r in range(k)]


def split_over_group(
    work: Callable[[Any, list], T], batch, samples: list, state: DistState
) -> list[T | None]:
    """``work(batch, samples)`` once per prompt across a sequence-parallel group: each rank runs it
    on its share of the prompts (:func:`group_shares`; a sub-batch of ``batch``) and every rank gets
    every share's result, in prompt order (None for an empty share). Without sequence parallelism:
    ``[work(batch, samples)]``.

    The ranks of a group must end with the same experience, yet generating every prompt on every
    rank doubles the work and holds only while the engines sample identically (which GPU kernels
    do not promise); each share is generated once, then sent (an object all-gather: keep the
    result's tensors on the CPU and leave the prompt batch out, every rank holds it). A share
    draws from its own random stream (:func:`own_random_stream`)."""
    if state.sp_size == 1:
        return [work(batch, samples)]
    from ..models.inputs import select_prompts

    mine = group_shares(len(samples), state)[state.rank % state.sp_size]
    with own_random_stream(state):
        result = work(select_prompts(batch, list(mine)), samples[mine.start : mine.stop]) if mine else None
    return gather_in_group(result, state)


def gather_in_group(obj: Any, state: DistState) -> list[Any]:
    """Every rank of this rank's sequence-parallel group's ``obj`` (picklable; tensors best on the
    CPU), in group order; ``[obj]`` without sequence parallelism."""
    if state.sp_size == 1:
        return [obj]
    out: list[Any] = [None] * state.sp_size
    dist.all_gather_object(out, obj, group=state.sp_group)
    return out


@contextmanager
def own_random_stream(state: DistState):
    """Under sequence parallelism, within the block this rank draws from a random stream of its
    own (its share of the rollouts or of validation): seeded by a number drawn from the generator
    the ranks of its group share (the same on each) and its place in the group. The shared
    generator stays in step over the group (the loss may draw from it: Clip-Cov's sampled tokens),
    and the shares stay reproducible, resumed runs included (a checkpoint holds the shared
    generator). Without sequence parallelism the block draws from the global generator."""
    if state.sp_size == 1:
        yield
        return
    seed = int(torch.randint(0, 2**62, (1,)))
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed + 1_000_003 * (state.rank % state.sp_size))
        yield


def split_prompts(chosen: list[int], state: DistState, tokens: dict[int, int] | None = None) -> list[int]:
    """This rank's share of a global batch: equal counts per rank (so every rank runs the same
    number of micro-batches), in contiguous blocks, or, given prompt ``tokens``, balanced by
    assigning the longest prompt first to the lightest rank."""
    per = len(chosen) // state.data_world
    if state.data_world == 1:
        return chosen
    if tokens is None:
        return chosen[state.data_rank * per : (state.data_rank + 1) * per]
    load, members = [0] * state.data_world, [[] for _ in range(state.data_world)]
    for i in sorted(chosen, key=lambda i: -tokens.get(i, 0)):
        r = min((r for r in range(state.data_world) if len(members[r]) < per), key=lambda r: load[r])
        members[r].append(i)
        load[r] += tokens.get(i, 0)
    return members[state.data_rank]
