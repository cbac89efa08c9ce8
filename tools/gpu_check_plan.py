"""The memory planner's predictions of the GPU check kit's own runs, put beside what the kit
measures, so that the first lent GPU also checks ``easyvideor1 plan``.

Two pairs (GiB), both in ``gpu_report.json`` ``plan_check``:

- ``update_peak``: the plan's ``update`` phase for the cache training run (the kit's run config on
  one GPU under a one-rank FSDP2 group, its videos' size and frames, its prompt as long as the
  video's tokens plus ``TEXT_TOKENS``), against the trainer's ``memory/update_peak_gib``;
- ``long_micro_batch``: the plan's update of one text sequence of the long phase's lengths in one
  process under bf16 autocast (what ``gpu_check_long.py`` runs), above the weights, against its
  ``peak_above_weights_gib``.

On a CPU (the dry run) the measured values are resident-set figures of tiny models: the pairs are
reported but only a GPU's are a check.
"""

from __future__ import annotations

# the prompt's tokens beside its video's: the template, the question, the frames' timestamps
TEXT_TOKENS = 512


def _pair(predicted: float, measured) -> dict:
    out = {"predicted_gib": round(predicted, 3), "measured_gib": measured}
    if isinstance(measured, (int, float)) and measured > 0:
        out["rel_error"] = round((predicted - measured) / measured, 3)
    return out


def plan_check(cfg_dict: dict, profile, gpu_memory_gib: float, measured: dict) -> dict:
    """The two pairs; ``measured``: ``update_peak`` and ``long_micro_batch`` as the kit read them."""
    from easyvideor1.config import RunConfig, load_config
    from easyvideor1.plan import Hardware, plan
    from easyvideor1.plan.architecture import architecture
    from easyvideor1.plan.memory import peak_parts
    from easyvideor1.plan.verdict import planner_for
    from easyvideor1.plan.workload import MicroBatch, workload

    device = "cuda" if profile.device == "cuda" else "cpu"
    hw = Hardware(gpus=1, memory_gib=gpu_memory_gib, device=device)
    width, height = profile.video_size
    seconds = profile.video_frames / profile.video_fps
    video = [f"plan.video_size=[{width},{height}]", f"plan.video_seconds={seconds}"]
    cfg = load_config(RunConfig, None, video, values=cfg_dict)
    arch = architecture(cfg.model.path)
    tokens = workload(cfg, arch, 1).video_tokens + TEXT_TOKENS
    cfg = load_config(RunConfig, None, [*video, f"data.max_prompt_length={tokens}"], values=cfg_dict)
    train = plan(cfg, hw, arch, fixes=False)
    out = {
        "update_peak": _pair(train.phase("update").peak_gib, measured.get("update_peak")),
        "prompt_tokens_planned": tokens,
    }
    # the long phase: one process (no FSDP), fp32 masters under bf16 autocast, one padded row
    long_cfg = load_config(RunConfig, None, ["distributed.group_with_one_rank=false"], values=cfg_dict)
    planner = planner_for(long_cfg, arch, hw)
    prompt, response = profile.long_prompt_tokens, profile.long_response_tokens
    row = MicroBatch("long", prompt + response, response + 1, 1, 0, 0, 0)
    parts, _ = peak_parts(planner.backward(row))
    above_weights = sum(parts.values()) + planner.gradients()
    out["long_micro_batch"] = _pair(above_weights / 2**30, measured.get("long_micro_batch"))
    return out
