"""Supervised warm-up on the records' offline responses, before RL (a cold-start remedy).

A tiny or weak policy may never sample a correct answer, and then GRPO has no signal; a few
supervised steps on ``offline_output`` fix that (with tools, on ``offline_turns`` replayed as
episodes: the policy's turns trained, the tool results between them attended). Under torchrun each rank trains on its share of
every global batch and the loss is normalised by the global token count, so the step equals the
single-process one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from ..data.dataset import MediaSample, RecordDataset, encode_prompts
from ..models.logprobs import Packing
from ..rollout.sampling import SamplingConfig
from .distributed import sum_over_ranks
from .experience import stacked
from .hybrid import offline_response
from .state import Components
from .update import response_rows


def sft_warmup(
    cfg,
    parts: Components,
    train_set: RecordDataset,
    train_idx: list[int],
    load: Callable[[list[int]], list[MediaSample]],
    max_new_tokens: int,
) -> bool:
    """Run ``trainer.sft_warmup_steps`` steps on the policy over the usable prompts ``train_idx``
    that have an offline response; False when there is nothing to do.

    ``load`` gives the samples of some indices whose media load (the others are skipped and
    listed, as at an RL step); offline responses are cut to ``max_new_tokens``.
    """
    tc = cfg.trainer
    state, engine, model = parts.dist, parts.engine, parts.model
    tools = parts.tools
    with_offline = [
        i
        for i in train_idx
        if (train_set.records[i].offline_turns and tools) or train_set.records[i].offline_output
    ]
    if not tc.sft_warmup_steps or not with_offline:
        return False
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=tc.sft_lr)
    parts.handoff.release()  # nothing generates until the warmed-up weights are pushed
    g = torch.Generator().manual_seed(tc.seed + 1)  # the same global batches on every rank
    per = max(tc.sft_batch_size // state.data_world, 1)
    sampling = SamplingConfig(max_new_tokens=max_new_tokens)  # an offline turn's token limit
    # the trainer's forward at temperature 1 (the supervised loss), padded, its tower encoding
    forward = dataclasses.replace(parts.forward, temperature=1.0, vision=None, packing=Packing())
    for step in range(tc.sft_warmup_steps):
        pick = torch.randint(len(with_offline), (per * state.data_world,), generator=g).tolist()
        pick = pick[state.data_rank * per : (state.data_rank + 1) * per]
        samples = load([with_offline[i] for i in pick])  # a failing video is skipped
        batch = encode_prompts(parts.processor, samples, cfg.data, train_set.loader)
        groups = [
            [offline_response(engine, parts.processor, batch, p, s, sampling, tools)]
            for p, s in enumerate(samples)
        ]
        exp = stacked(batch, groups, engine.pad_id)
        tokens = sum_over_ranks({"n": float(exp.mask.sum())})["n"]
        # the trainer's forward (episodes: tool turns attended, their frames in; policy tokens trained)
        rows, mask, _ = response_rows(exp, list(range(len(exp))))
        logp, _ = forward.logprobs(rows)
        # FSDP averages gradients over all ranks: scale by their number so they add up to the
        # global mean's (sequence parallelism: each rank's are its tokens' share of its group's)
        # (where, not a product: a vision placeholder of a tool turn has log-prob -inf, and -inf * 0 is NaN)
        local = -torch.where(mask.to(logp.device).bool(), logp, 0.0).sum() / tokens
        opt.zero_grad(set_to_none=True)
        (local * state.world).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.max_grad_norm)
        opt.step()
        if step % 10 == 0 or step == tc.sft_warmup_steps - 1:
            loss = sum_over_ranks({"l": float(local.detach())})["l"]
            parts.logger.log(0, {"sft/loss": loss, "sft/step": step}, ("sft/loss",))
    parts.handoff.resume()  # wake the engine's weights, push the warmed-up ones, wake its KV cache
    return True
