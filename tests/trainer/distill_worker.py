"""Run by tests under ``torchrun`` (or plain ``python`` for the single-process reference): one
distillation step on the global batch [video, image, text, mixed] (rank 0: three prompts, rank 1:
one, so filler forwards run), through the trainer's own teacher (``trainer/teacher.py``):

- GKD from a checkpoint teacher, built by ``build_teacher`` (FSDP2-sharded with the policy under
  torchrun): the teacher's log-probs and top-4 ids, one update of the policy with the top-k KL term;
- the self-teacher's log-probs of the same tokens over its privileged view (the record's answer
  appended), from the policy before the update.

Writes the updated weights and, in the metadata, every sequence's teacher log-probs (gathered
over the ranks) and the update's metrics.

Usage: distill_worker.py MODEL TEACHER RECORDS OUT
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import torch
import torch.distributed as dist
from safetensors.torch import save_file

from easyvideor1.algorithms.distill import DistillInputs, distill_advantages
from easyvideor1.config import load_config
from easyvideor1.data.dataset import RecordDataset
from easyvideor1.models.loading import load_policy
from easyvideor1.models.logprobs import Packing, PolicyForward
from easyvideor1.models.vision import DummyVisionPass
from easyvideor1.resolve import resolve_config
from easyvideor1.rollout.base import banned_token_ids
from easyvideor1.trainer.distributed import full_weights, init_distributed, shard_model, shutdown_distributed
from easyvideor1.trainer.teacher import Teacher, build_teacher
from easyvideor1.trainer.update import UpdateSettings, experience_logprobs, policy_update

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from dist_worker import KINDS, build_experience  # noqa: E402


def main() -> int:
    model_dir, teacher_dir, records, out = sys.argv[1:5]
    cfg = resolve_config(
        load_config(
            overrides=[
                f"model.path={model_dir}",
                f"data.train_files=[{records}]",
                "data.video_fps=null",
                "data.video_nframes=4",
                "algorithm.distill.objective=gkd",
                "algorithm.distill.options.top_k=4",
                f"algorithm.distill.teacher={teacher_dir}",
                "algorithm.distill.micro_batch_size=3",
                "distributed.timeout_minutes=1.0",
            ]
        )
    )
    state = init_distributed(cfg.distributed)
    torch.manual_seed(0)
    model, processor = load_policy(model_dir)
    model.train()
    if state.enabled:
        shard_model(model, cfg.distributed, state)
    banned = banned_token_ids(processor.tokenizer)
    forward = PolicyForward(model, DummyVisionPass(model), None, banned, packing=Packing(micro_batch_size=2))
    teacher = build_teacher(cfg, state, processor, forward)
    dataset = RecordDataset.from_files([records], cfg.data)
    kinds = list(KINDS) if not state.enabled else (list(KINDS[:3]) if state.rank == 0 else list(KINDS[3:]))
    exp = build_experience(processor, dataset, kinds)
    by_id = {r.problem_id: i for i, r in enumerate(dataset.records)}
    step = SimpleNamespace(experience=exp, samples=[dataset[by_id[k]] for k in kinds])
    ctx = SimpleNamespace(
        parts=SimpleNamespace(forward=forward, processor=processor), cfg=cfg, data=None, state=None
    )
    ctx.data = SimpleNamespace(train_set=dataset)
    exp.old_logp, _ = experience_logprobs(forward, exp)
    exp.teacher = teacher.signal(ctx, step)
    # the policy as its own teacher, shown the answer (computed before the update changes it)
    self_teacher = Teacher(None, False, teacher_context())
    self_logp = self_teacher.signal(ctx, step).logp
    dc = cfg.algorithm.distill
    inputs = DistillInputs(exp.advantages, exp.old_logp, exp.teacher, exp.mask)
    exp.advantages = distill_advantages(dc.objective, inputs, dc.reward_weight, dc.coef, {}).advantages
    settings = UpdateSettings(max_grad_norm=1e9, distill_loss="gkd", distill_coef=dc.coef)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    metrics = policy_update(forward, optimizer, None, exp, [list(range(len(exp)))], settings)
    logps = {"teacher": gathered(exp.teacher.logp * exp.mask), "self": gathered(self_logp * exp.mask)}
    weights = {k: v.clone().contiguous() for k, v in full_weights(model)}
    if state.is_main:
        save_file(weights, out, metadata={"metrics": json.dumps(metrics), "logps": json.dumps(logps)})
    shutdown_distributed()
    return 0


def teacher_context():
    from easyvideor1.data.privileged import privileged_context

    return privileged_context("answer")


def gathered(values: torch.Tensor) -> list[list[float]]:
    """Every rank's rows, rank after rank (one process: its own)."""
    rows = values.tolist()
    if not (dist.is_available() and dist.is_initialized()):
        return rows
    out: list = [None] * dist.get_world_size()
    dist.all_gather_object(out, rows)
    return [row for part in out for row in part]


if __name__ == "__main__":
    raise SystemExit(main())
