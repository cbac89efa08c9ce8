"""One step's experience: prompts -> groups of responses (online and offline) -> scores -> advantages.

Hybrid groups: for a record with ``offline_output``, the group holds ``n - k`` generated responses
and ``k`` offline ones; only ``n - k`` are generated (the reference generated ``n`` and overwrote
one). Offline text is tokenised with the end-of-turn token appended and truncated to the response
limit (flagged), scored by the same reward function, and takes part in the group statistics. In
``below_threshold`` mode the ``n - k`` online responses are scored first; a group whose mean
accuracy reaches the threshold is completed with ``k`` more online responses instead.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..data.dataset import Sample
from ..models.inputs import PromptBatch
from ..rewards import score_record
from ..rollout.base import Responses, SamplingConfig


@dataclass
class Experience:
    """``N`` sequences (grouped by prompt, in prompt order) and everything the update needs."""

    batch: PromptBatch
    prompt_of: list[int]  # prompt index of each sequence
    ids: torch.Tensor  # [N, T] response ids, right-padded
    mask: torch.Tensor  # [N, T]
    texts: list[str]
    offline: torch.Tensor  # [N] bool
    truncated: torch.Tensor  # [N] bool
    scores: dict[str, torch.Tensor]  # overall / accuracy / format, [N]
    tasks: list[str]
    advantages: torch.Tensor | None = None  # [N, T]
    old_logp: torch.Tensor | None = None  # [N, T]
    ref_logp: torch.Tensor | None = None  # [N, T]
    # the engine's own log-prob of each sampled token (NaN rows: offline or not returned); compared
    # with old_logp it measures the training/inference mismatch, e.g. stale rollout weights
    rollout_logp: torch.Tensor | None = None  # [N, T]
    metrics: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.prompt_of)


def pad_stack(rows: list[torch.Tensor], pad: int) -> torch.Tensor:
    """Variable-length 1-D rows as one right-padded ``[N, T]`` tensor."""
    width = max((len(r) for r in rows), default=0)
    out = torch.full((len(rows), max(width, 1)), pad, dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def tokenize_offline(tokenizer, text: str, eos_id: int, max_tokens: int) -> tuple[torch.Tensor, bool]:
    """Offline response ids with the end-of-turn token appended; truncated (flag True) to the limit."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [eos_id]
    truncated = len(ids) > max_tokens
    return torch.tensor(ids[:max_tokens], dtype=torch.long), truncated


def score(
    texts: list[str], samples: list[Sample], prompt_of: list[int], lengths: list[int], reward_cfg
) -> tuple:
    """Rewards of each response from the record it answers (one implementation for train and eval)."""
    rows: list[dict[str, Any]] = []
    for text, p, n_tokens in zip(texts, prompt_of, lengths, strict=True):
        rec = samples[p].record
        rows.append(score_record(text, rec, config=reward_cfg, response_length=n_tokens))
    keys = ("overall", "accuracy", "format")
    scores = {k: torch.tensor([float(r[k]) for r in rows], dtype=torch.float32) for k in keys}
    return scores, [r["task"] for r in rows], sum(1 for r in rows if r.get("error"))


def _append_online(per_prompt: list[list[tuple]], responses: Responses, counts: list[int]) -> None:
    """Distribute generated responses (prompt order, ``counts[p]`` each) to their groups."""
    row = 0
    for p, count in enumerate(counts):
        for _ in range(count):
            m = responses.mask[row].bool()
            logp = responses.logprobs[row][m] if responses.logprobs is not None else None
            per_prompt[p].append(
                (responses.ids[row][m], responses.texts[row], False, responses.truncated[row], logp)
            )
            row += 1


def collect(
    engine,
    tokenizer,
    batch: PromptBatch,
    samples: list[Sample],
    rollout_cfg,
    sampling: SamplingConfig,
    reward_cfg,
) -> Experience:
    """Generate, add offline responses, and score: the groups of one step (prompt order kept)."""
    n, k, mode = rollout_cfg.n, rollout_cfg.offline_k, rollout_cfg.hybrid
    eos_id, pad_id = engine.eos_ids[0], engine.pad_id
    has_offline = [mode != "off" and k > 0 and bool(s.record.offline_output) for s in samples]
    online_n = [n - k if h else n for h in has_offline]
    first = engine.generate(batch, online_n, sampling)
    # responses per prompt: list of (ids, text, offline, truncated)
    per_prompt: list[list[tuple]] = [[] for _ in samples]
    _append_online(per_prompt, first, online_n)
    use_offline = list(has_offline)
    if mode == "below_threshold" and any(has_offline):
        # score the online part first; confident groups are completed online instead
        prompt_of = [p for p, c in enumerate(online_n) for _ in range(c)]
        s, _, _ = score(first.texts, samples, prompt_of, first.mask.sum(1).tolist(), reward_cfg)
        acc = s["accuracy"]
        for p in range(len(samples)):
            if has_offline[p]:
                idx = [i for i, q in enumerate(prompt_of) if q == p]
                mean = float(acc[idx].mean()) if idx else 0.0
                use_offline[p] = mean < rollout_cfg.hybrid_threshold
        extra = [k if has_offline[p] and not use_offline[p] else 0 for p in range(len(samples))]
        if any(extra):
            _append_online(per_prompt, engine.generate(batch, extra, sampling), extra)
    for p, sample in enumerate(samples):
        if use_offline[p]:
            ids, trunc = tokenize_offline(
                tokenizer, sample.record.offline_output, eos_id, sampling.max_new_tokens
            )
            # a truncated offline response is scored on what is trained: the kept tokens only
            text = engine.decode(ids) if trunc else sample.record.offline_output
            for _ in range(k):
                per_prompt[p].append((ids, text, True, trunc, None))
    prompt_of = [p for p, group in enumerate(per_prompt) for _ in group]
    flat = [r for group in per_prompt for r in group]
    ids = pad_stack([r[0] for r in flat], pad_id)
    mask = pad_stack([torch.ones(len(r[0]), dtype=torch.long) for r in flat], 0)
    texts = [r[1] for r in flat]
    rollout_logp = None
    if any(r[4] is not None for r in flat):
        rollout_logp = torch.full(ids.shape, float("nan"))
        for i, r in enumerate(flat):
            if r[4] is not None:
                rollout_logp[i, : len(r[4])] = r[4]
    scores, tasks, errors = score(texts, samples, prompt_of, mask.sum(1).tolist(), reward_cfg)
    exp = Experience(
        batch=batch,
        prompt_of=prompt_of,
        ids=ids,
        mask=mask,
        texts=texts,
        offline=torch.tensor([r[2] for r in flat]),
        truncated=torch.tensor([bool(r[3]) for r in flat]),
        scores=scores,
        tasks=tasks,
        rollout_logp=rollout_logp,
    )
    exp.metrics["reward/errors"] = float(errors)
    exp.metrics["hybrid/groups_with_offline"] = float(sum(use_offline))
    return exp


def merge_groups(parts: list[tuple[Experience, list[Sample], list[int]]], batch: PromptBatch) -> Experience:
    """One experience from the chosen groups of several rounds.

    ``parts`` holds (experience, its samples, the prompt indices to keep); ``batch`` encodes the kept
    samples in the same order. Responses do not depend on how the prompts were padded, so they are
    carried over as they are; log-probs are computed afterwards on the merged batch.
    """
    rows, prompt_of = [], []
    new_p = 0
    for exp, _, keep in parts:
        for p in keep:
            for i, q in enumerate(exp.prompt_of):
                if q == p:
                    rows.append((exp, i))
                    prompt_of.append(new_p)
            new_p += 1
    ids = pad_stack([e.ids[i][e.mask[i].bool()] for e, i in rows], 0)  # padding is masked out
    mask = pad_stack([torch.ones(int(e.mask[i].sum()), dtype=torch.long) for e, i in rows], 0)
    merged = Experience(
        batch=batch,
        prompt_of=prompt_of,
        ids=ids,
        mask=mask,
        texts=[e.texts[i] for e, i in rows],
        offline=torch.tensor([bool(e.offline[i]) for e, i in rows]),
        truncated=torch.tensor([bool(e.truncated[i]) for e, i in rows]),
        scores={k: torch.stack([e.scores[k][i] for e, i in rows]) for k in parts[0][0].scores},
        tasks=[e.tasks[i] for e, i in rows],
        rollout_logp=_merge_rollout_logp(rows, ids.shape),
    )
    for key in parts[0][0].metrics:
        merged.metrics[key] = sum(e.metrics.get(key, 0.0) for e, _, _ in parts)
    return merged


def _merge_rollout_logp(rows: list[tuple[Experience, int]], shape) -> torch.Tensor | None:
    if all(e.rollout_logp is None for e, _ in rows):
        return None
    out = torch.full(shape, float("nan"))
    for j, (e, i) in enumerate(rows):
        if e.rollout_logp is not None:
            n = int(e.mask[i].sum())
            out[j, :n] = e.rollout_logp[i, :n]
    return out
