"""Run by tests/trainer/test_lora_training.py under ``torchrun`` (or plain ``python`` for the
single-process reference): one LoRA update, FSDP2-sharded when launched with ranks.

    lora_dist_worker.py MODEL RECORDS OUT

The global batch [video, image, text, mixed] is split 3 + 1 over two ranks (as ``dist_worker.py``'s
``update`` mode does). Writes, from rank 0, the updated adapter tensors (safetensors) with metadata:
the step's metrics, the per-sequence summed log-probs of the policy, of the reference (adapter
disabled) and, in one process, of the plain base model, and how far the adapters moved.
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
from easyvideor1.models.lora import adapter_parameters, reference_forward
from easyvideor1.models.vision import DummyVisionPass
from easyvideor1.resolve import resolve_data
from easyvideor1.rollout.base import banned_token_ids
from easyvideor1.trainer.config import LoraConfig
from easyvideor1.trainer.distributed import (
    DistributedConfig,
    all_gather,
    full_weights,
    init_distributed,
    shard_model,
    shutdown_distributed,
)
from easyvideor1.trainer.update import UpdateSettings, experience_logprobs, policy_update

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from dist_worker import KINDS, build_experience  # noqa: E402


def _sums(logp: torch.Tensor, mask: torch.Tensor) -> list[float]:
    return [float(x) for x in (logp.detach().cpu() * mask).sum(1)]


def main() -> int:
    model_dir, records, out = sys.argv[1:4]
    state = init_distributed(DistributedConfig(timeout_minutes=1.0))
    torch.manual_seed(0)
    model, processor = load_policy(model_dir, lora=LoraConfig(rank=8, alpha=16))
    with torch.no_grad():  # B starts at zero; seeded values (the same on every rank) make A train too
        g = torch.Generator().manual_seed(1)
        for name, p in adapter_parameters(model).items():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    initial = {k: v.detach().clone() for k, v in full_weights(model) if "lora_" in k}
    model.train()
    if state.enabled:
        shard_model(model, DistributedConfig(), state)
    dummy = DummyVisionPass(model)
    data_cfg = resolve_data(DataConfig(video_fps=None, video_nframes=4), model_dir)
    dataset = RecordDataset.from_files([records], data_cfg)
    kinds = list(KINDS)
    if state.enabled:
        kinds = kinds[:3] if state.rank == 0 else kinds[3:]
    exp = build_experience(processor, dataset, kinds)
    banned = banned_token_ids(processor.tokenizer)
    mask = exp.mask.float()
    forward = PolicyForward(model, dummy, banned=banned, packing=Packing(micro_batch_size=2))
    with reference_forward(model):
        ref, _ = experience_logprobs(forward, exp)
    exp.old_logp, _ = experience_logprobs(forward, exp)
    info = {"ref_logp": _sums(ref, mask), "policy_logp": _sums(exp.old_logp, mask)}
    if not state.enabled:  # the plain base model, loaded on its own
        base, _ = load_policy(model_dir)
        base_logp, _ = experience_logprobs(forward.of(base.train(), DummyVisionPass(base)), exp)
        info["base_logp"] = _sums(base_logp, mask)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    settings = UpdateSettings(max_grad_norm=1e9)
    metrics = policy_update(forward, optimizer, None, exp, [list(range(len(exp)))], settings)
    weights = {k: v.clone().contiguous() for k, v in full_weights(model) if "lora_" in k}
    gathered = all_gather(info)  # rank order = the single process's prompt order
    if state.is_main:
        merged = {k: [x for part in gathered for x in part.get(k, [])] for k in info}
        moved = max(float((weights[k] - initial[k]).abs().max()) for k in weights)
        meta = {**metrics, **merged, "moved": moved}
        save_file(weights, out, metadata={"metrics": json.dumps(meta)})
    model = optimizer = dummy = None
    shutdown_distributed()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
