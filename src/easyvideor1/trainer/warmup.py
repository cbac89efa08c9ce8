"""Supervised warm-up on the records' offline responses, before RL (a cold-start remedy).

A tiny or weak policy may never sample a correct answer, and then GRPO has no signal; a few
supervised steps on ``offline_output`` fix that. Under torchrun each rank trains on its share of
every global batch and the loss is normalised by the global token count, so the step equals the
single-process one.
"""

from __future__ import annotations

import torch

from ..data.dataset import encode_prompts
from ..models.inputs import expand
from ..models.logprobs import response_logprobs
from .distributed import DistState, sum_over_ranks
from .experience import pad_stack, tokenize_offline


def sft_warmup(trainer, state: DistState) -> bool:
    """Run ``trainer.sft_warmup_steps`` steps on ``trainer``'s policy; False when there is nothing to do."""
    tc = trainer.cfg.trainer
    train_set, engine = trainer.train_set, trainer.engine
    with_offline = [i for i in trainer.train_idx if train_set.records[i].offline_output]
    if not tc.sft_warmup_steps or not with_offline:
        return False
    model = trainer.model
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=tc.sft_lr)
    g = torch.Generator().manual_seed(tc.seed + 1)  # the same global batches on every rank
    eos = engine.eos_ids[0]
    per = max(tc.sft_batch_size // state.world, 1)
    for step in range(tc.sft_warmup_steps):
        pick = torch.randint(len(with_offline), (per * state.world,), generator=g).tolist()
        pick = pick[state.rank * per : (state.rank + 1) * per]
        samples = trainer.loadable([with_offline[i] for i in pick])  # a failing video is skipped
        batch = encode_prompts(trainer.processor, samples, trainer.cfg.data, train_set.loader)
        rows = [
            tokenize_offline(
                trainer.processor.tokenizer, s.record.offline_output, eos, trainer.sampling.max_new_tokens
            )[0]
            for s in samples
        ]
        ids = pad_stack(rows, engine.pad_id)
        mask = pad_stack([torch.ones(len(r), dtype=torch.long) for r in rows], 0)
        tokens = sum_over_ranks({"n": float(mask.sum())})["n"]
        logp, _ = response_logprobs(
            model, expand(batch, [1] * len(samples)), ids, mask, engine.banned, 1.0, trainer.dummy
        )
        # FSDP averages gradients over ranks: scale by world so they add up to the global mean's
        local = -(logp * mask.to(logp.device)).sum() / tokens
        opt.zero_grad(set_to_none=True)
        (local * state.world).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.max_grad_norm)
        opt.step()
        if step % 10 == 0 or step == tc.sft_warmup_steps - 1:
            loss = sum_over_ranks({"l": float(local.detach())})["l"]
            trainer.logger.log(0, {"sft/loss": loss, "sft/step": step}, ("sft/loss",))
    trainer.sync_rollout_weights()
    return True
