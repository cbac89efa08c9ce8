"""The GPU check kit's settings: the shapes and limits of a run (the GPU's real sizes, or tiny ones
for the dry run on a CPU), its phases, and the run configuration both training runs share.

Read by ``tools/gpu_check.py`` (the driver) and by the tests, which check the GPU profile's
configuration on the CPU before a GPU ever loads it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass
class Profile:
    """Shapes and limits of one kit run (``gpu``: real sizes; ``dry-run``: tiny, for a CPU)."""

    model_size: str  # "2b" (Qwen3-VL-2B's architecture) or "tiny"
    device: str  # where the random weights are initialised
    videos: int
    video_frames: int
    video_size: tuple[int, int]  # width, height
    video_fps: float
    video_min_pixels: int
    video_max_pixels: int
    records_per_video: int
    steps: int  # RL steps per run; the first is a warm-up and left out of the means
    prompts_per_step: int
    n: int
    max_new_tokens: int
    micro_batch_size: int
    eval_samples: int
    eval_max_new_tokens: int
    eval_batch_size: int
    workers: int
    # the long micro-batch phase: one sequence at the 8B recipe's longest (prompt + response tokens)
    long_prompt_tokens: int
    long_response_tokens: int
    # per-phase limits (seconds); each is also cut to what is left of the overall deadline
    limits: dict[str, float] = field(default_factory=dict)
    deadline_s: float = 450.0


GPU = Profile(
    model_size="2b",
    device="cuda",
    videos=8,
    video_frames=64,
    video_size=(448, 252),
    video_fps=8.0,
    video_min_pixels=3136,
    video_max_pixels=262144,
    records_per_video=2,
    steps=3,
    prompts_per_step=4,
    n=4,
    max_new_tokens=256,
    micro_batch_size=4,
    eval_samples=16,
    eval_max_new_tokens=128,
    eval_batch_size=8,
    workers=8,
    long_prompt_tokens=20000,
    long_response_tokens=4096,
    # the cache run also writes one checkpoint (~31 GB: fp32 weights and AdamW moments, bf16 HF export)
    limits={"prepare": 100, "train_cache": 180, "train_decode": 100, "long_micro_batch": 60, "eval": 70},
    # 8 minutes in all: the wheel install counts (the deadline runs from the kit's start); the
    # rest leaves room to stop a phase past its limit (SIGTERM, then SIGKILL after 10 s) and clean up
    deadline_s=440.0,
)

DRY_RUN = Profile(
    model_size="tiny",
    device="cpu",
    videos=4,
    video_frames=8,
    video_size=(64, 48),
    video_fps=4.0,
    video_min_pixels=1024,
    video_max_pixels=4096,
    records_per_video=2,
    steps=2,
    prompts_per_step=2,
    n=2,
    max_new_tokens=4,
    micro_batch_size=4,
    eval_samples=4,
    eval_max_new_tokens=4,
    eval_batch_size=2,
    workers=2,
    long_prompt_tokens=300,
    long_response_tokens=60,
    limits={"prepare": 120, "train_cache": 150, "train_decode": 150, "long_micro_batch": 60, "eval": 120},
    deadline_s=540.0,
)

PHASES = ("prepare", "train_cache", "train_decode", "long_micro_batch", "eval")


def run_config(p: Profile, work: str) -> dict:
    """The run configuration both training runs share (the decode run overrides data.cache_mode)."""
    return {
        "data": {
            "train_files": [os.path.join(work, "synth", "train.jsonl")],  # next to the videos it names
            "model_family": "qwen3vl",
            "video_fps": None,
            "video_nframes": p.video_frames,  # every frame: 64 frames of 448x256 = 3,584 video tokens
            "video_min_pixels": p.video_min_pixels,
            "video_max_pixels": p.video_max_pixels,
            "cache_dir": os.path.join(work, "cache"),
            "cache_mode": "cache_only",  # a cache miss is an error: the cache run must not decode
            "prompt_template": "reasoning",
            "max_prompt_length": 16384,
        },
        # the recipes' precision: fp32 master weights and AdamW moments, bf16 compute, fp32 reduction
        "model": {"path": os.path.join(work, "model"), "dtype": "float32", "gradient_checkpointing": True},
        "rollout": {
            "engine": "hf",
            "n": p.n,
            "temperature": 1.0,
            "max_new_tokens": p.max_new_tokens,
            "hybrid": "always",  # one gold response per group: non-zero advantages, real gradients
            "offline_k": 1,
        },
        "algorithm": {
            "adv_estimator": "grpo",
            "policy_loss": "ppo",
            "loss_options": {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28},
            "loss_agg_mode": "token-mean",
            "kl": {"type": "none"},
        },
        "trainer": {
            "output_dir": os.path.join(work, "train"),
            "max_steps": p.steps,
            "prompts_per_step": p.prompts_per_step,
            "mini_batch_prompts": p.prompts_per_step,
            "micro_batch_size": p.micro_batch_size,
            "lr": 1.0e-6,
            "weight_decay": 0.01,
            "val_size": 0,
            "save_every": 0,
            "export_dtype": "bfloat16",  # the checkpoint's HF weights for serving; the sharded state is fp32
            "resume": "never",
            "loggers": ["jsonl"],
        },
        # join a one-rank process group under torchrun: NCCL (gloo in the dry run) and FSDP2 run
        "distributed": {"group_with_one_rank": True, "param_dtype": "bfloat16", "reduce_dtype": "float32"},
    }
