"""Run by tests under ``torchrun`` (or plain ``python``): one step's log-probs and update with the
step speed-ups (packing, a token budget, reused vision features, shared prefixes) all on or all off, on the global batch [video, image, text, mixed] (rank 0: the
first three prompts, rank 1: the last, so filler micro-batches run). Writes the updated weights.

Usage: speedups_worker.py MODEL RECORDS OUT (--all-on | --all-off)
"""

from __future__ import annotations

import json
import sys

import torch
from safetensors.torch import save_file

from easyvideor1.data.config import DataConfig
from easyvideor1.data.dataset import RecordDataset
from easyvideor1.models.loading import load_policy
from easyvideor1.models.logprobs import Packing, PolicyForward
from easyvideor1.models.vision import DummyVisionPass
from easyvideor1.models.vision_cache import VisionFeatureCache
from easyvideor1.resolve import resolve_data
from easyvideor1.rollout.base import banned_token_ids
from easyvideor1.trainer.distributed import (
    DistributedConfig,
    full_weights,
    init_distributed,
    shard_model,
    shutdown_distributed,
)
from easyvideor1.trainer.update import UpdateSettings, experience_logprobs, policy_update

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from dist_worker import KINDS, build_experience  # noqa: E402


def main() -> int:
    model_dir, records, out, mode = sys.argv[1:5]
    on = mode == "--all-on"
    state = init_distributed(DistributedConfig(timeout_minutes=1.0))
    torch.manual_seed(0)
    model, processor = load_policy(model_dir, freeze_vision_tower=True)
    model.train()
    if state.enabled:
        shard_model(model, DistributedConfig(), state)
    dummy = DummyVisionPass(model)
    cache = VisionFeatureCache([model]) if on else None
    data_cfg = resolve_data(DataConfig(video_fps=None, video_nframes=4), model_dir)
    dataset = RecordDataset.from_files([records], data_cfg)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    kinds = list(KINDS)
    if state.enabled:
        kinds = kinds[:3] if state.rank == 0 else kinds[3:]
    exp = build_experience(processor, dataset, kinds)
    banned = banned_token_ids(processor.tokenizer)
    budget = 160 if on else 0
    if cache is not None:
        cache.start(exp.batch)
    packing = Packing(padding_free=on, max_tokens=budget, micro_batch_size=2, shared_prefix="on" if on else "off")
    forward = PolicyForward(model, dummy, cache, banned, packing=packing)
    exp.old_logp, _ = experience_logprobs(forward, exp)
    settings = UpdateSettings(max_grad_norm=1e9)
    everything = list(range(len(exp)))
    # two PPO epochs over one mini-batch: the second reuses the features again
    metrics = policy_update(forward, optimizer, None, exp, [everything, everything], settings)
    if cache is not None:
        metrics["encodes"] = float(cache.encodes)
        cache.stop()
    weights = {k: v.clone().contiguous() for k, v in full_weights(model)}
    if state.is_main:
        save_file(weights, out, metadata={"metrics": json.dumps(metrics)})
    model = optimizer = dummy = cache = None
    shutdown_distributed()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
