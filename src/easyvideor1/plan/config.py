"""``PlanConfig``: the ``plan`` section of the run configuration (the machine a plan is made for).

``easyvideor1 plan config=run.yaml --gpus 8 --gpu-memory 80`` reads the run's own sections (the
model, the frame budget, the micro-batches, the engine) and these keys for the machine; the flags
are shortcuts for them. Torch-free: the config loads without it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..validation import at_least, in_range, one_of, positive, require, whole_number

# Accelerators the planner knows: (memory GiB as the driver reports it, dense bf16 TFLOPS,
# memory bandwidth GB/s, per-GPU interconnect GB/s one way), from the vendors' data sheets (SXM).
GPUS: dict[str, tuple[float, float, float, float]] = {
    "h100": (79.6, 989.0, 3350.0, 450.0),
    "h200": (139.8, 989.0, 4800.0, 450.0),
    "a100": (79.2, 312.0, 2039.0, 300.0),
    "b200": (178.4, 2250.0, 8000.0, 900.0),
}


@dataclass
class PlanConfig:
    """The machine ``easyvideor1 plan`` predicts for, and the assumptions of its time estimate.

    Attributes:
        gpus: GPUs the run is launched on (``torchrun --nproc-per-node`` times nodes): FSDP2 shards
            over them, ``distributed.sequence_parallel_size`` groups them. 1 = one process, no FSDP.
        gpu: ``h100``, ``h200``, ``a100`` or ``b200``: sets the defaults of the next four keys.
        gpu_memory_gib: Memory of one GPU in GiB (default: the ``gpu``'s as the driver reports it,
            e.g. 79.6 for an H100 80GB).
        peak_tflops: Dense bf16 TFLOPS of one GPU (default: the ``gpu``'s data sheet).
        memory_bandwidth_gbs: GPU memory bandwidth in GB/s (bounds decoding).
        interconnect_gbs: Per-GPU bandwidth between GPUs in GB/s, one way (bounds the weight push's
            all-gather).
        mfu: Share of ``peak_tflops`` the compute-bound passes reach (prefill, log-probs, update);
            an assumption of the time estimate, not a measurement.
        reserved_gib: Memory per GPU outside every tensor the planner counts: the CUDA context,
            cuBLAS and NCCL workspaces, the caching allocator's fragmentation.
        video_size: ``[width, height]`` of the videos memory is planned for (default 1080p
            landscape, the largest frames datasets commonly hold); the frame rule and the
            ``data.video_*`` pixel caps then size the frames.
        video_seconds: Their length (default two hours: long enough to reach any frame cap).
        min_prompt_tokens: The shortest prompt of the data: memory is planned for micro-batches
            of responses behind prompts this short too (more responses fit a token budget then).
        mean_prompt_tokens / mean_response_tokens: Typical lengths of the data, for the time
            estimate only (0: the configured maxima, ``data.max_prompt_length`` and
            ``rollout.max_new_tokens``). Memory is always planned for the maxima.
    """

    gpus: int = 1
    gpu: str = "h100"
    gpu_memory_gib: float | None = None
    peak_tflops: float | None = None
    memory_bandwidth_gbs: float | None = None
    interconnect_gbs: float | None = None
    mfu: float = 0.35
    reserved_gib: float = 2.0
    video_size: list[int] = field(default_factory=lambda: [1920, 1080])
    video_seconds: float = 7200.0
    min_prompt_tokens: int = 256
    mean_prompt_tokens: int = 0
    mean_response_tokens: int = 0

    def __post_init__(self) -> None:
        whole_number("plan.gpus", self.gpus, 1)
        one_of("plan.gpu", self.gpu, tuple(GPUS))
        for key in ("gpu_memory_gib", "peak_tflops", "memory_bandwidth_gbs", "interconnect_gbs"):
            if getattr(self, key) is not None:
                positive(f"plan.{key}", getattr(self, key))
        in_range("plan.mfu", self.mfu, 0.0, 1.0, low_open=True)
        at_least("plan.reserved_gib", self.reserved_gib, 0.0)
        require(
            len(self.video_size) == 2 and all(isinstance(x, int) and x >= 16 for x in self.video_size),
            "plan.video_size",
            "must be [width, height], each a whole number >= 16",
            self.video_size,
        )
        positive("plan.video_seconds", self.video_seconds)
        whole_number("plan.min_prompt_tokens", self.min_prompt_tokens, 1)
        whole_number("plan.mean_prompt_tokens", self.mean_prompt_tokens, 0, "0: data.max_prompt_length")
        whole_number("plan.mean_response_tokens", self.mean_response_tokens, 0, "0: rollout.max_new_tokens")
