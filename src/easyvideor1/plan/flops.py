"""FLOPs of each phase of a step on one GPU, the bytes the weight push moves, and a time estimate.

The estimate's assumptions are stated with it (:func:`assumptions`): compute-bound passes
(prefill, log-probs, update) run at ``plan.mfu`` of the GPU's peak; decoding is bounded by memory
bandwidth, each step reading the engine's weights and the KV cache of every running sequence; the
push all-gathers each weight over the interconnect and copies it into the engine. Every sequence is
as long as ``plan.mean_response_tokens`` (unset: ``rollout.max_new_tokens``, the longest a step can
take), every prompt as ``plan.mean_prompt_tokens`` (unset: ``data.max_prompt_length``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .memory import Planner
from .workload import responses_behind_prompt


@dataclass(frozen=True)
class PhaseCost:
    """One phase's work on one GPU and its estimated seconds."""

    name: str
    flops: float
    seconds: float
    bytes_moved: float = 0.0


def _attention_flops(planner: Planner, queries: float, context: float) -> float:
    """QK^T and AV of ``queries`` tokens over an average ``context`` (every attention layer)."""
    t = planner.arch.text
    return 4 * queries * context * t.heads * t.head_dim * t.attention_layers


def _body_params(planner: Planner) -> int:
    """Parameters a token's forward multiplies by, without the LM head."""
    p = planner.arch.params
    return p.active_per_token - planner.arch.text.vocab * planner.arch.text.hidden


def _vision_flops(planner: Planner, patches: int) -> float:
    """The tower's matmuls, and attention within each temporal patch's patches."""
    v = planner.arch.vision
    per_frame = planner.work.video_patches / max(1, math.ceil(planner.work.frames / v.temporal_patch_size))
    return 2 * planner.arch.params.vision * patches + 4 * patches * per_frame * v.hidden * v.depth


def lengths(planner: Planner) -> tuple[int, int]:
    """(prompt, response) tokens the time estimate assumes: ``plan.mean_prompt_tokens`` and
    ``plan.mean_response_tokens``, or the configured maxima."""
    p = planner.cfg.plan
    return p.mean_prompt_tokens or planner.work.prompt, p.mean_response_tokens or planner.work.response


def _group_forward(planner: Planner) -> float:
    """FLOPs of one forward over a group (its prompt and n responses) as the trainer lays it out."""
    w, t = planner.work, planner.arch.text
    prompt, response = lengths(planner)
    per_micro = responses_behind_prompt(planner.cfg.trainer, prompt, response, w.n)
    prompts = math.ceil(w.n / per_micro)  # the prompt is computed once per micro-batch it is in
    tokens = prompts * prompt + w.n * response
    flops = 2 * _body_params(planner) * tokens + 2 * t.vocab * t.hidden * w.n * response
    flops += _attention_flops(planner, prompts * prompt, prompt / 2)
    flops += _attention_flops(planner, w.n * response, prompt + response / 2)
    patches = w.video_patches * min(1.0, prompt / w.prompt)  # a shorter prompt holds less video
    return flops + prompts * _vision_flops(planner, patches)


def costs(planner: Planner, hw) -> list[PhaseCost]:
    """The step's phases on one GPU: generate, logprobs, update, wake and push."""
    cfg, w = planner.cfg, planner.work
    sp = cfg.distributed.sequence_parallel_size
    rate = hw.peak_tflops * 1e12 * hw.mfu
    groups_per_rank = w.sequences_per_rank / w.n  # a data-parallel group's prompts
    forward = groups_per_rank * _group_forward(planner) / sp  # SP splits each sequence's work
    out = [_generate(planner, hw, rate)]
    passes = 1 + (1 if cfg.algorithm.kl.enabled else 0)  # old, and reference, log-probs
    out.append(PhaseCost("logprobs", passes * forward, passes * forward / rate))
    recompute = 1 if cfg.model.gradient_checkpointing else 0
    update = (3 + recompute) * forward * cfg.trainer.ppo_epochs
    out.append(PhaseCost("update", update, update / rate))
    if cfg.rollout.engine == "vllm":
        out.append(_push(planner, hw))
    return out


def _generate(planner: Planner, hw, rate: float) -> PhaseCost:
    """Prefill (each prompt once: the n samples share its KV cache) at ``rate``, then decoding
    bounded by memory bandwidth: each step reads the engine's weights and every running
    sequence's KV cache."""
    w = planner.work
    prompt, response = lengths(planner)
    prompts = w.prompts_per_rank
    prefill = prompts * (
        2 * _body_params(planner) * prompt
        + _attention_flops(planner, prompt, prompt / 2)
        + _vision_flops(planner, w.video_patches * min(1.0, prompt / w.prompt))
    )
    sequences = prompts * w.n
    context = prompt + response / 2
    running = sequences  # the HF engine decodes the rank's sequences in one batch
    if planner.vllm:  # as many as the KV cache holds: prompts share their blocks among their n samples
        kv_tokens = planner.engine_parts()["kv cache"] / planner.kv_bytes_per_token()
        running = max(1.0, min(sequences, kv_tokens / max(1.0, prompt / w.n + response)))
    waves = math.ceil(sequences / running)
    weights = planner.engine_weights()
    kv_read = running * context * planner.kv_bytes_per_token()
    step_s = max(
        (weights + kv_read) / (hw.memory_bandwidth_gbs * 1e9), 2 * running * _body_params(planner) / rate
    )
    decode_flops = (
        sequences
        * response
        * (2 * planner.arch.params.active_per_token + _attention_flops(planner, 1, context))
    )
    return PhaseCost("generate", prefill + decode_flops, prefill / rate + waves * response * step_s)


def _push(planner: Planner, hw) -> PhaseCost:
    """Every weight all-gathered from the shards (the masters' dtype) and copied into the engine."""
    p, s = planner.precision, planner.sharding
    total = planner.arch.params.total
    gathered = total * p.master * (s.shards - 1) / s.shards
    copied = total * p.engine
    seconds = gathered / (hw.interconnect_gbs * 1e9) + 2 * copied / (hw.memory_bandwidth_gbs * 1e9)
    return PhaseCost("wake and push", 0.0, seconds, gathered + copied)


def assumptions(hw) -> list[str]:
    """The time estimate's assumptions, as printed with it."""
    return [
        f"compute-bound passes at {hw.mfu:.0%} of {hw.peak_tflops:g} dense bf16 TFLOPS (plan.mfu, plan.peak_tflops)",
        f"decoding bounded by {hw.memory_bandwidth_gbs:g} GB/s: each step reads the engine's weights and "
        "every running sequence's KV cache (plan.memory_bandwidth_gbs)",
        f"the push all-gathers each weight at {hw.interconnect_gbs:g} GB/s (plan.interconnect_gbs)",
        "prompts of plan.mean_prompt_tokens and responses of plan.mean_response_tokens (unset: "
        "data.max_prompt_length and rollout.max_new_tokens, the longest a step can take)",
    ]
