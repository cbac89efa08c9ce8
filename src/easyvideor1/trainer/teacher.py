"""The distillation teacher (``algorithm.distill``): which model it is, and its log-probs of a step's
responses.

Two kinds:

- **a checkpoint** (``teacher: PATH``): loaded frozen like the reference model (held in the compute
  dtype, sharded by FSDP2 under torchrun, optionally offloaded), with its own micro-batches. It
  must speak the policy's token ids (:func:`check_same_token_ids`); its size and family may differ.
  A teacher of another family reads the same frames through its own processor and chat template,
  each frame and image resized to its patch grid (:class:`OwnPrompts`).
- **the policy itself** (``teacher: self``): the current weights, or the reference (with LoRA:
  the adapter-free base), shown privileged context (``data/privileged.py``) the student never sees.

Either way the teacher's log-probs come through the policy's log-prob pass
(:class:`~easyvideor1.models.logprobs.PolicyForward`: packing, shared prefixes, and for the policy
or its reference the step's cached vision features), over the student's sampled tokens only.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from PIL import Image

from ..algorithms.distill import TeacherSignal
from ..data.config import DataConfig
from ..data.dataset import MediaSample, encode_prompts, load_media
from ..data.privileged import PrivilegedContext, privileged_context
from ..errors import ConfigError
from ..media.resize import resize_frames
from ..models.families import get_family
from ..models.inputs import PromptBatch
from ..models.loading import load_policy
from ..models.logprobs import PolicyForward
from ..models.lora import reference_forward
from ..models.vision import DummyVisionPass
from ..resolve import resolve_data
from .distributed import DistState, shard_model
from .experience import Experience
from .precision import autocast_forward, compute_dtype
from .update import experience_readout

if TYPE_CHECKING:
    from .state import Step, StepContext

log = logging.getLogger(__name__)

GIB = 2**30


@dataclass
class Teacher:
    """A run's teacher and what scoring a step with it needs."""

    forward: PolicyForward | None
    """A checkpoint teacher's log-prob pass (its own model and micro-batches); None: the policy's."""
    reference: bool
    """A self-teacher that is the reference (or, with LoRA, the adapter-free base), not the policy."""
    context: PrivilegedContext | None
    """What the teacher sees beyond the student's prompt (None: the student's prompt as it is)."""
    top_k: int = 0
    """Its most likely ids per position the objective reads (``gkd``), 0: the sampled tokens' only."""
    own: OwnPrompts | None = None
    """A teacher of another family than the policy's: how its prompts are encoded."""

    def signal(self, ctx: StepContext, step: Step) -> TeacherSignal:
        """The teacher's log-prob of each of the step's sampled tokens (and its top-k where the
        objective reads them), computed without gradient over the teacher's view of the prompts."""
        parts, exp = ctx.parts, step.experience
        view = exp
        if self.own is not None:
            samples = self.context.samples(step.samples) if self.context is not None else step.samples
            view = dataclasses.replace(
                exp, batch=self.own.encode(samples, ctx.cfg.data, ctx.data.train_set.loader)
            )
        elif self.context is not None:
            view = self.privileged(parts, exp, step.samples, ctx.cfg.data, ctx.data.train_set.loader)
        if self.forward is not None:
            forward, scope = self.forward, nullcontext()
        elif not self.reference:
            forward, scope = parts.forward, nullcontext()
        elif parts.ref_forward is not None:
            forward, scope = parts.ref_forward, nullcontext()
        else:  # LoRA: the adapter-free base (or the warm-up's adapter) inside the policy
            snapshot = parts.lora_reference if ctx.state.reference_moved else None
            forward, scope = parts.forward, reference_forward(parts.forward.model, snapshot)
        with scope:
            read = experience_readout(forward, view, self.top_k)
        return TeacherSignal(read.logp, read.top_ids, read.top_logp)

    def privileged(self, parts, exp: Experience, samples, data_cfg, loader) -> Experience:
        """``exp`` with the teacher's prompts: each sample's context appended, encoded by the
        policy's processor over the same loaded media. The pixel tensors are the student's own (the
        same frames give the same tensors), so the step's vision cache serves both views."""
        batch = encode_prompts(parts.processor, self.context.samples(samples), data_cfg, loader)
        inputs = dict(batch.inputs)
        for key, value in exp.batch.inputs.items():
            if key not in ("input_ids", "attention_mask", "mm_token_type_ids"):
                if key in inputs and tuple(inputs[key].shape) != tuple(value.shape):
                    shapes = f"{tuple(inputs[key].shape)} vs {tuple(value.shape)}"
                    raise RuntimeError(f"the teacher's view changed {key}: {shapes}")
                inputs[key] = value
        return dataclasses.replace(exp, batch=dataclasses.replace(batch, inputs=inputs))


@dataclass
class OwnPrompts:
    """A teacher of another family's prompts: its processor and chat template over the policy's
    frames and images (the ones the student saw, sampled once), each resized to the nearest size on
    the teacher's patch grid (``factor``: patch x merge), as its processor expects."""

    processor: Any
    data_cfg: DataConfig
    """The ``data`` section finished for the teacher's family (its processor settings)."""
    factor: int

    def encode(self, samples: list[MediaSample], policy_data: DataConfig, loader) -> PromptBatch:
        refit = [
            dataclasses.replace(s, loaded=self.refit(s.loaded or load_media(s, policy_data, loader)))
            for s in samples
        ]
        return encode_prompts(self.processor, refit, self.data_cfg, loader)

    def refit(self, loaded: tuple[list, list]) -> tuple[list, list]:
        videos, images = loaded
        out = []
        for video in videos:
            _, h, w, _ = video.frames.shape
            frames = resize_frames(video.frames, self.grid(h), self.grid(w))
            out.append(dataclasses.replace(video, frames=frames))
        resized = [im.resize((self.grid(im.width), self.grid(im.height)), Image.BICUBIC) for im in images]
        return out, resized

    def grid(self, size: int) -> int:
        return max(self.factor, round(size / self.factor) * self.factor)


def build_teacher(cfg, dist: DistState, processor, forward: PolicyForward) -> Teacher | None:
    """The run's teacher (None without ``algorithm.distill``); a checkpoint is checked (token ids,
    family, memory) before its weights load."""
    dc = cfg.algorithm.distill
    if not dc.enabled:
        return None
    if dc.top_k and dist.sp_size > 1:
        raise ConfigError(
            f"algorithm.distill.objective={dc.objective} reads the teacher's top-k ids, which are not split over "
            f"a sequence-parallel group yet (distributed.sequence_parallel_size={dist.sp_size}): use opd or rlsd"
        )
    context = None if dc.context_source == "none" else privileged_context(dc.context_source)
    if dc.teacher == "self":
        log.info(
            "distillation (%s): the teacher is the %s, shown context %s",
            dc.objective,
            dc.self_teacher,
            dc.context_source,
        )
        return Teacher(None, dc.self_teacher == "reference", context, dc.top_k)
    family = check_teacher_checkpoint(cfg, dist, processor)
    model, teacher_processor = load_policy(
        dc.teacher, cfg.model.dtype, attn_implementation=cfg.model.attn_implementation
    )
    own = None
    if family.model_type != get_family(cfg.data.model_family).model_type:
        teacher_data = resolve_data(dataclasses.replace(cfg.data, model_family=None), dc.teacher)
        own = OwnPrompts(teacher_processor, teacher_data, family.frames.factor)
    model = model.eval().requires_grad_(False).to(compute_dtype(cfg))
    if dist.sp_size > 1:  # its forwards split sequences over the group as the policy's do
        from ..models.sequence_parallel import enable

        enable(model, dist.sp)
    if dist.enabled:
        shard_model(model, dataclasses.replace(cfg.distributed, cpu_offload=dc.offload), dist)
    else:
        model.to(dist.device)
        autocast_forward(model, compute_dtype(cfg), dist.device)
    packing = dataclasses.replace(
        forward.packing,
        micro_batch_size=dc.micro_batch_size or forward.packing.micro_batch_size,
        max_tokens=dc.max_tokens_per_micro_batch or forward.packing.max_tokens,
    )
    # under FSDP the teacher's forward is a collective: every rank needs its vision passes
    dummy = DummyVisionPass(model) if dist.enabled else None
    teacher_forward = dataclasses.replace(forward, model=model, dummy=dummy, vision=None, packing=packing)
    log.info(
        "distillation (%s): the teacher is %s, shown context %s", dc.objective, dc.teacher, dc.context_source
    )
    return Teacher(teacher_forward, False, context, dc.top_k, own)


def check_teacher_checkpoint(cfg, dist: DistState, processor):
    """A checkpoint teacher's refusals, before any weight loads: other token ids, or more memory
    than ``algorithm.distill`` declares room for; returns its family."""
    from transformers import AutoTokenizer

    from ..models.families import family_of_checkpoint

    dc = cfg.algorithm.distill
    path = dc.teacher
    if not os.path.isdir(path):
        raise ConfigError(f"algorithm.distill.teacher={path!r} is not a model directory (or use self)")
    family = family_of_checkpoint(path)
    check_same_token_ids(
        getattr(processor, "tokenizer", processor), AutoTokenizer.from_pretrained(path), path
    )
    need = teacher_bytes(path, compute_dtype(cfg)) / dist.world
    room, where = teacher_room(dc, dist)
    if need > room:
        fix = (
            "algorithm.distill.offload=true (under torchrun, on GPUs)"
            if not dc.offload and dist.device.type == "cuda"
            else "more ranks, or a smaller teacher"
        )
        raise ConfigError(
            f"algorithm.distill.teacher {path} needs {need / GIB:.2f} GiB per rank in "
            f"{str(compute_dtype(cfg)).removeprefix('torch.')} and {where} has {room / GIB:.2f} GiB: "
            f"use {fix}"
        )
    return family


def check_same_token_ids(student, teacher, path: str) -> None:
    """Refuse a teacher whose tokenizer gives any of the student's tokens another id: its
    log-probs would be of other tokens. A larger teacher vocabulary is fine (ids past the
    student's are never sampled)."""
    own, theirs = student.get_vocab(), teacher.get_vocab()
    differ = [(tok, i, theirs.get(tok)) for tok, i in own.items() if theirs.get(tok) != i]
    if differ:
        tok, i, j = min(differ, key=lambda d: d[1])
        raise ConfigError(
            f"algorithm.distill.teacher {path}: its tokenizer differs from the policy's on "
            f"{len(differ)} token(s), e.g. {tok!r} is id {i} for the policy and "
            f"{'missing' if j is None else f'id {j}'} for the teacher; a teacher must use the same token ids"
        )


def teacher_bytes(path: str, dtype: torch.dtype) -> int:
    """The teacher's weights in ``dtype``, counted from its safetensors headers (nothing loaded)."""
    from safetensors import safe_open

    files = [f for f in os.listdir(path) if f.endswith(".safetensors")]
    if not files:
        raise ConfigError(f"algorithm.distill.teacher {path}: no .safetensors weights in it")
    count = 0
    for name in files:
        with safe_open(os.path.join(path, name), "pt") as f:  # reads the header only
            count += sum(math.prod(f.get_slice(key).get_shape()) for key in f.keys())
    return count * torch.tensor([], dtype=dtype).element_size()


def teacher_room(dc, dist: DistState) -> tuple[float, str]:
    """(bytes, where) the teacher may take per rank: ``algorithm.distill.memory_gib`` when set,
    else what is free where its weights will live (the GPU, or host memory when offloaded or on CPU)."""
    if dc.memory_gib > 0:
        return dc.memory_gib * GIB, "algorithm.distill.memory_gib"
    if dist.device.type == "cuda" and not dc.offload:
        free, _ = torch.cuda.mem_get_info(dist.device)
        return float(free), f"{dist.device} (free now)"
    return float(available_host_bytes()), "host memory (available now)"


def available_host_bytes() -> int:
    """MemAvailable of ``/proc/meminfo`` (what the kernel can give without swapping)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
