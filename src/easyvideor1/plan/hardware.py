"""The machine a plan is made for: one GPU's memory, speed and links, and how many there are."""

from __future__ import annotations

from dataclasses import dataclass

from .config import GPUS, PlanConfig


@dataclass(frozen=True)
class Hardware:
    """What the planner assumes of the machine (``plan`` section; ``device="cpu"`` for the
    calibration runs on a CPU: no engine, no CUDA context, one process)."""

    gpus: int = 1
    memory_gib: float = 79.6
    device: str = "cuda"
    peak_tflops: float = 989.0
    memory_bandwidth_gbs: float = 3350.0
    interconnect_gbs: float = 450.0
    mfu: float = 0.35
    reserved_gib: float = 2.0

    @classmethod
    def of(cls, plan: PlanConfig) -> Hardware:
        memory, tflops, bandwidth, link = GPUS[plan.gpu]
        return cls(
            gpus=plan.gpus,
            memory_gib=plan.gpu_memory_gib or memory,
            peak_tflops=plan.peak_tflops or tflops,
            memory_bandwidth_gbs=plan.memory_bandwidth_gbs or bandwidth,
            interconnect_gbs=plan.interconnect_gbs or link,
            mfu=plan.mfu,
            reserved_gib=plan.reserved_gib,
        )
