"""The plan of a run: each phase's memory and verdict, the KV cache's room, the time estimate, and
for a phase that does not fit, the first settings that would make it fit (by their keys)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from ..errors import ConfigError
from .architecture import Architecture, architecture
from .flops import PhaseCost, assumptions, costs
from .hardware import Hardware
from .memory import GIB, Phase, Planner
from .workload import Workload, workload

# Settings tried, in this order, for a phase that does not fit; each with the values to try
# (the first that fits is named). A candidate that is already set, or does not apply, is skipped.
TRAINER_FIXES = (
    "trainer.max_tokens_per_micro_batch",
    "trainer.micro_batch_size",
    "model.gradient_checkpointing",
    "distributed.sequence_parallel_size",
    "distributed.cpu_offload",
    "rollout.max_new_tokens",
    "data.max_prompt_length",
    "plan.gpus",
)
ENGINE_FIXES = (
    "rollout.vllm.gpu_memory_utilization",
    "distributed.cpu_offload",
    "rollout.max_new_tokens",
    "data.max_prompt_length",
    "plan.gpus",
)
FIXES = {
    "generate": ENGINE_FIXES,
    "engine asleep": ("rollout.vllm.sleep_between_phases", "distributed.cpu_offload", "plan.gpus"),
    "logprobs": ("rollout.vllm.sleep_between_phases", *TRAINER_FIXES),
    "update": ("rollout.vllm.sleep_between_phases", *TRAINER_FIXES),
    "wake and push": ("distributed.cpu_offload", "rollout.vllm.gpu_memory_utilization", "plan.gpus"),
}


@dataclass
class PhaseVerdict:
    """A phase's memory against the GPU's, and what would make it fit."""

    phase: Phase
    fits: bool
    margin_gib: float  # memory left (negative: short by)
    reason: str = ""  # why it does not fit, when memory alone is not the reason
    fixes: list[dict] = field(default_factory=list)  # [{"key", "value", "peak_gib"}], at most two

    def to_json(self) -> dict:
        p = self.phase
        return {
            "name": p.name,
            "peak_gib": round(p.peak_gib, 3),
            "fits": self.fits,
            "margin_gib": round(self.margin_gib, 3),
            "detail": p.detail,
            "parts_gib": {k: round(v / GIB, 3) for k, v in p.parts.items() if v},
            **({"reason": self.reason} if self.reason else {}),
            **({"fixes": self.fixes} if self.fixes else {}),
        }


@dataclass
class Plan:
    """Everything ``easyvideor1 plan`` prints (``to_json`` for scripts)."""

    arch: Architecture
    hardware: Hardware
    work: Workload
    verdicts: list[PhaseVerdict]
    costs: list[PhaseCost]
    kv: dict  # tokens of KV the engine's cache holds, groups of prompt + n responses at once
    notes: list[str] = field(default_factory=list)  # settings that work against each other

    @property
    def fits(self) -> bool:
        return all(v.fits for v in self.verdicts)

    def phase(self, name: str) -> Phase:
        for v in self.verdicts:
            if v.phase.name == name:
                return v.phase
        raise KeyError(name)

    def to_json(self) -> dict:
        p, w, hw = self.arch.params, self.work, self.hardware
        return {
            "fits": self.fits,
            "model": {"name": self.arch.name, "model_type": self.arch.model_type, "parameters": p.total},
            "gpus": hw.gpus,
            "gpu_memory_gib": hw.memory_gib,
            "phases": [v.to_json() for v in self.verdicts],
            "kv_cache": self.kv,
            "notes": self.notes,
            "workload": {
                "prompt_tokens": w.prompt,
                "response_tokens": w.response,
                "n": w.n,
                "video_frames": w.frames,
                "frame_size": list(w.frame_size),
                "video_tokens": w.video_tokens,
                "vision_patches": w.video_patches,
                "micro_batches": [dataclasses.asdict(mb) for mb in w.micro_batches],
            },
            "estimate": {
                "label": "estimate under the stated assumptions, not a measurement",
                "phases": [
                    {
                        "name": c.name,
                        "tflops": round(c.flops / 1e12, 1),
                        "seconds": round(c.seconds, 3),
                        **({"bytes_moved": c.bytes_moved} if c.bytes_moved else {}),
                    }  # fmt: skip
                    for c in self.costs
                ],
                "step_seconds": round(sum(c.seconds for c in self.costs), 1),
                "assumptions": assumptions(self.hardware),
            },
        }


def plan(cfg, hardware: Hardware, arch: Architecture | None = None, *, fixes: bool = True) -> Plan:
    """The plan of the run ``cfg`` (a run config) on ``hardware``. ``arch``: the model's facts
    (default: read from ``model.path``). ``fixes``: name settings for the phases that do not fit."""
    arch = arch or architecture(cfg.model.path)
    cfg = _finished(cfg, arch)
    _check(cfg, hardware)
    planner = planner_for(cfg, arch, hardware)
    verdicts = [_verdict(planner, phase) for phase in planner.phases()]
    if fixes:
        for v in verdicts:
            if not v.fits:
                v.fixes = _fixes(cfg, arch, hardware, v.phase.name)
    return Plan(
        arch, hardware, planner.work, verdicts, costs(planner, hardware), _kv(planner), _notes(planner)
    )


def _finished(cfg, arch: Architecture):
    """``cfg`` with its model family named (a checkpoint on disk decides as in training; a
    released name by its table)."""
    from ..resolve import resolve_config

    if os.path.isfile(os.path.join(cfg.model.path, "config.json")):
        return resolve_config(cfg)
    if cfg.data.model_family is None:
        cfg = dataclasses.replace(cfg, data=dataclasses.replace(cfg.data, model_family=arch.model_type))
    return cfg


def _check(cfg, hw: Hardware) -> None:
    sp = cfg.distributed.sequence_parallel_size
    if hw.gpus % sp:
        raise ConfigError(f"plan.gpus={hw.gpus} is not a multiple of distributed.sequence_parallel_size={sp}")
    if cfg.trainer.prompts_per_step * sp < hw.gpus:
        raise ConfigError(
            f"trainer.prompts_per_step={cfg.trainer.prompts_per_step} gives some of the {hw.gpus} GPUs "
            "no prompt: raise it or plan for fewer GPUs (plan.gpus)"
        )


def planner_for(cfg, arch: Architecture, hw: Hardware) -> Planner:
    """The planner of the run ``cfg`` on ``hw`` (what every phase and the fixes are computed from)."""
    distill = cfg.algorithm.distill
    checkpoint_teacher = distill.enabled and distill.teacher != "self"
    return Planner(
        cfg=cfg,
        arch=arch,
        work=workload(cfg, arch, hw.gpus),
        gpus=hw.gpus,
        memory_bytes=hw.memory_gib * GIB,
        reserved_bytes=0.0 if hw.device == "cpu" else hw.reserved_gib * GIB,
        device=hw.device,
        teacher=architecture(distill.teacher) if checkpoint_teacher else None,
    )


def _kv(planner: Planner) -> dict:
    if not planner.vllm:
        return {}
    parts = planner.engine_parts()
    w = planner.work
    tokens = int(parts["kv cache"] / planner.kv_bytes_per_token())
    group = w.prompt + w.n * w.response  # the n samples share their prompt's blocks
    return {
        "gib": round(parts["kv cache"] / GIB, 3),
        "tokens": tokens,
        "bytes_per_token": int(planner.kv_bytes_per_token()),
        "groups_at_once": tokens // group,
        "group_tokens": group,
    }


def _notes(planner: Planner) -> list[str]:
    """Settings that are each valid but work against each other at these sizes."""
    cfg, w = planner.cfg, planner.work
    out = []
    limit = cfg.rollout.vllm.max_model_len
    if cfg.rollout.engine == "vllm" and limit and limit < w.prompt + w.response:
        out.append(
            f"rollout.vllm.max_model_len={limit} is shorter than data.max_prompt_length + "
            f"rollout.max_new_tokens = {w.prompt + w.response}: vLLM refuses a prompt over it and "
            "cuts responses short"
        )
    behind = w.responses_behind_prompt
    if cfg.trainer.shared_prefix != "off" and cfg.trainer.max_tokens_per_micro_batch and behind < w.n:
        whole = w.prompt + w.n * w.response
        out.append(
            f"trainer.max_tokens_per_micro_batch={cfg.trainer.max_tokens_per_micro_batch} holds "
            f"{behind} of a group's {w.n} responses behind a {w.prompt:,}-token prompt: the shared "
            f"prompt is computed {-(-w.n // behind)} times per group ({whole:,} would compute it once)"
        )
    return out


def _verdict(planner: Planner, phase: Phase) -> PhaseVerdict:
    margin = planner.memory_bytes - phase.peak_bytes
    reason = ""
    if phase.name == "generate" and planner.vllm:
        w = planner.work
        tokens = planner.engine_parts()["kv cache"] / planner.kv_bytes_per_token()
        if tokens < w.prompt + w.response:
            reason = (
                f"the engine's KV cache holds {int(tokens):,} tokens, less than one sequence of "
                f"{w.prompt + w.response:,} (data.max_prompt_length + rollout.max_new_tokens)"
            )
    return PhaseVerdict(phase, margin >= 0 and not reason, margin / GIB, reason)


def _fixes(cfg, arch: Architecture, hw: Hardware, name: str) -> list[dict]:
    """The first two settings (in :data:`FIXES` order) under which phase ``name`` fits."""
    found = []
    for key in FIXES[name]:
        for value in _candidates(cfg, hw, key):
            try:
                changed, machine = cfg, hw
                if key == "plan.gpus":
                    machine = dataclasses.replace(hw, gpus=value)
                else:
                    changed = _with(cfg, key, value)
                planner = planner_for(changed, arch, machine)
                _check(changed, machine)
            except (ConfigError, ValueError):
                continue
            phase = next(p for p in planner.phases() if p.name == name)
            if _verdict(planner, phase).fits:
                found.append({"key": key, "value": value, "peak_gib": round(phase.peak_gib, 3)})
                break
        if len(found) == 2:
            break
    return found


def _candidates(cfg, hw: Hardware, key: str) -> list:
    """Values of ``key`` to try, the least change first."""
    current = hw.gpus if key == "plan.gpus" else _get(cfg, key)
    if isinstance(current, bool):
        return [] if current else [True]
    if key == "distributed.sequence_parallel_size":
        return [k for k in (2, 4, 8) if k > current and hw.gpus % k == 0]
    if key == "plan.gpus":  # more GPUs: FSDP2 shards the states thinner
        return [g for g in (2, 4, 8, 16, 32, 64, 128) if g > hw.gpus]
    if key == "rollout.vllm.gpu_memory_utilization":
        share = cfg.rollout.vllm.memory_share(colocated=True)
        return [round(share - d, 2) for d in (0.05, 0.1, 0.15, 0.2, 0.25, 0.3) if share - d > 0.05] + [
            round(share + d, 2) for d in (0.05, 0.1, 0.15, 0.2) if share + d < 0.95
        ]
    if key == "trainer.max_tokens_per_micro_batch" and current == 0:
        return []
    if key == "trainer.micro_batch_size" and cfg.trainer.max_tokens_per_micro_batch > 0:
        return []  # the token budget decides the micro-batches
    if isinstance(current, int) and current > 1:
        step = 1024 if current >= 2048 else 1
        values = [int(current * f) // step * step for f in (0.875, 0.75, 0.625, 0.5, 0.375, 0.25, 0.125)]
        return [v for v in dict.fromkeys(values) if 0 < v < current]
    return []


def _get(cfg, key: str):
    value = cfg
    for part in key.split("."):
        value = getattr(value, part)
    return value


def _with(cfg, key: str, value):
    """``cfg`` with the dotted ``key`` set to ``value`` (its section's checks run again)."""
    head, _, rest = key.partition(".")
    if not rest:
        return dataclasses.replace(cfg, **{head: value})
    return dataclasses.replace(cfg, **{head: _with(getattr(cfg, head), rest, value)})
