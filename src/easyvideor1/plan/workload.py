"""What one GPU must hold and compute in a step of the run, read from its config: the longest
prompt and response, the vision tower's input for the largest video the frame budget allows, the
micro-batches' shapes, the share of the step's sequences each rank runs.

Memory is planned for the worst micro-batch the settings allow, so that a plan that fits is a
guarantee for every batch the data can produce, not for an average one. Two compositions are
planned and the larger of each phase reported (:class:`MicroBatch`):

- ``longest prompt``: a prompt of ``data.max_prompt_length`` tokens (with the largest video of the
  frame budget: ``plan.video_size`` and ``plan.video_seconds``, 1080p and two hours by default) and as many of its responses of ``rollout.max_new_tokens`` as the micro-batch holds;
- ``most responses``: as many response tokens as the micro-batch holds behind prompts of
  ``plan.min_prompt_tokens`` (the logits path grows with the response tokens, not the prompt's).

A micro-batch never holds more sequences than one mini-batch gives a rank, nor more prompts than
its sequences touch (a group's n sequences are consecutive).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..media.sampling import frame_indices, video_frame_size
from .architecture import Architecture

# The frame rate of the planned video (``plan.video_size``, ``plan.video_seconds``): the frame
# budget samples it down; only a video slower than the sampling rate would give fewer frames.
PLANNED_FPS = 30.0


@dataclass(frozen=True)
class MicroBatch:
    """The shape of one forward of the trainer's passes, on one rank.

    Attributes:
        name: ``longest prompt`` or ``most responses``.
        tokens: Language-model tokens of the forward (this rank's share under sequence parallelism).
        kept: Positions whose logits are computed (the response tokens; this rank's share).
        rows: Rows of the forward (padded layout: one per sequence; packed or shared: 1).
        patches: Vision-tower patches encoded in the forward (this rank's share).
        media_tokens: Language-model tokens of the encoded media (the tower's merged output).
        mask_elements: Elements of an explicit attention mask the forward builds (0 without one):
            the padded layout's ``rows x tokens x tokens``, the shared layout's responses-by-block mask.
    """

    name: str
    tokens: int
    kept: int
    rows: int
    patches: int
    media_tokens: int
    mask_elements: int


@dataclass(frozen=True)
class Workload:
    """The run's per-step work, as the planner reads it from the config.

    Attributes:
        prompt: Longest prompt in tokens (``data.max_prompt_length``).
        response: Longest response (``rollout.max_new_tokens``).
        n: Responses per prompt.
        frames: Frames of the planned video under the frame budget.
        frame_size: (height, width) of its frames after the frame rule.
        video_patches: Vision-tower patches of that video (temporal patches x patches per frame).
        video_tokens: Its language-model tokens (patches / merge^2), capped by the prompt length.
        prompts_per_rank: Prompts one rank generates in a step.
        sequences_per_rank: Sequences (prompt + response) one rank's trainer passes hold in a step.
        micro_batches: The planned compositions (:class:`MicroBatch`).
        responses_behind_prompt: Responses of a group one micro-batch holds behind its longest
            prompt (the shared layout computes the prompt once per micro-batch it is in).
    """

    prompt: int
    response: int
    n: int
    frames: int
    frame_size: tuple[int, int]
    video_patches: int
    video_tokens: int
    prompts_per_rank: float
    sequences_per_rank: float
    micro_batches: tuple[MicroBatch, ...]
    responses_behind_prompt: int


def planned_video(cfg) -> tuple[int, tuple[int, int]]:
    """(frames, (height, width)) of the planned video (``plan.video_size``, ``plan.video_seconds``)
    under the data section's frame budget."""
    params = cfg.data.sampling_params()
    width, height = cfg.plan.video_size
    indices, _ = frame_indices(params, max(1, int(cfg.plan.video_seconds * PLANNED_FPS)), PLANNED_FPS)
    nframes = len(indices)
    return nframes, video_frame_size(params, height, width, nframes)


def workload(cfg, arch: Architecture, gpus: int) -> Workload:
    """The per-rank work of the run ``cfg`` (a finished run config) on ``gpus`` GPUs."""
    vis = arch.vision
    frames, (height, width) = planned_video(cfg)
    temporal = max(1, math.ceil(frames / vis.temporal_patch_size))
    per_frame = (height // vis.patch_size) * (width // vis.patch_size)
    merge = vis.merge_size**2
    prompt = cfg.data.max_prompt_length
    # truncation keeps the prompt within max_prompt_length by dropping frames: the tower then
    # encodes no more than the prompt can hold
    video_tokens = min(temporal * per_frame // merge, prompt)
    video_patches = video_tokens * merge
    response = cfg.rollout.max_new_tokens
    n = cfg.rollout.n
    sp = cfg.distributed.sequence_parallel_size
    groups = gpus // sp  # data-parallel groups
    prompts_per_rank = cfg.trainer.prompts_per_step / groups / sp  # an SP group splits generation
    sequences = cfg.trainer.prompts_per_step * n / groups
    mini = max(1, cfg.trainer.mini_batch_prompts * n // groups)  # a rank's sequences per mini-batch
    shortest = min(cfg.plan.min_prompt_tokens, prompt)
    longest = _micro_batch(
        cfg.trainer, "longest prompt", prompt, response, n, mini, video_patches, video_tokens
    )
    most = _micro_batch(cfg.trainer, "most responses", shortest, response, n, mini, 0, 0)
    return Workload(
        prompt=prompt,
        response=response,
        n=n,
        frames=frames,
        frame_size=(height, width),
        video_patches=video_patches,
        video_tokens=video_tokens,
        prompts_per_rank=prompts_per_rank,
        sequences_per_rank=sequences,
        micro_batches=(_split(longest, sp), _split(most, sp)),
        responses_behind_prompt=responses_behind_prompt(cfg.trainer, prompt, response, n),
    )


def responses_behind_prompt(trainer, prompt: int, response: int, n: int) -> int:
    """Responses of a group one shared-layout micro-batch holds behind its ``prompt``-token
    prompt (the prompt is computed once per micro-batch it is in); 1 without sharing."""
    if trainer.shared_prefix == "off":
        return 1
    if trainer.max_tokens_per_micro_batch <= 0:
        return min(n, trainer.micro_batch_size)
    return min(n, max(1, (trainer.max_tokens_per_micro_batch - prompt) // response))


def _micro_batch(trainer, name, prompt, response, n, mini, patches, media_tokens) -> MicroBatch:
    """The largest forward of ``name``'s composition under the trainer's micro-batch settings;
    ``mini``: the sequences of one mini-batch on one rank."""
    budget = trainer.max_tokens_per_micro_batch
    shared = trainer.shared_prefix != "off"
    packed = trainer.padding_free or shared or budget > 0
    if budget <= 0:  # a fixed count of consecutive sequences
        k = min(trainer.micro_batch_size, mini)
        prompts = _prompts_touched(k, n, aligned=True) if shared else k
    elif not shared:  # whole sequences while they fit (one over the budget runs alone)
        k = prompts = min(mini, max(1, budget // (prompt + response)))
    elif name == "longest prompt":  # the prompt once, as many of its responses as fit
        k, prompts = min(n, mini, max(1, (budget - prompt) // response)), 1
    else:  # responses of several groups behind their prompts
        k = min(mini, max(1, (budget - prompt) // response))
        while k > 1 and _prompts_touched(k, n) * prompt + k * response > budget:
            k -= 1
        prompts = _prompts_touched(k, n)
    tokens = prompts * prompt + k * response if shared else k * (prompt + response)
    rows = 1 if packed else k
    mask = 0
    if not packed:
        mask = rows * (prompt + response) ** 2  # sdpa's [rows, 1, T, T] mask of a padded batch
    elif shared:
        mask = k * response * (prompt + k * response)  # each block's responses x block mask
    return MicroBatch(name, tokens, k * response, rows, patches * prompts, media_tokens * prompts, mask)


def _prompts_touched(k: int, n: int, aligned: bool = False) -> int:
    """The most groups of ``n`` consecutive sequences ``k`` consecutive sequences can touch
    (``aligned``: cut from a group's start in steps of ``k``, as a count-based split is)."""
    if aligned and (k % n == 0 or n % k == 0):
        return math.ceil(k / n)
    return min(k, (k - 1) // n + 2)


def _split(mb: MicroBatch, sp: int) -> MicroBatch:
    """This rank's share of ``mb`` under sequence parallelism of ``sp`` ranks."""
    if sp == 1:
        return mb
    return MicroBatch(
        mb.name,
        math.ceil(mb.tokens / sp),
        math.ceil(mb.kept / sp),
        mb.rows,
        math.ceil(mb.patches / sp),
        mb.media_tokens,
        0,  # the Ulysses attention runs each head shard on the whole sequence without a mask
    )
