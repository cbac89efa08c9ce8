"""``easyvideor1 train`` under torchrun, each rank recording what its rollout engine generated for
the training steps (validation aside) and what it trained on.

Usage: sp_train_worker.py OUT_DIR train KEY=VALUE ...

Writes ``OUT_DIR/rank_<rank>.json``: ``rounds``, one entry per collection this rank ran (a round of
dynamic sampling included): the records it was given and how many prompts its engine generated
for; ``greedy``: the prompts of each greedy-baseline generation; ``steps``: a digest of each step's
experience (responses, masks, flags, texts, scores, prompts) and its number of prompts.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from easyvideor1.cli import main
from easyvideor1.rollout.hf import HFRolloutEngine
from easyvideor1.trainer import evaluate, loop, rollouts, rounds

seen: dict[str, list] = {"rounds": [], "greedy": [], "validation": [], "steps": []}
now: list[dict] = []  # the collection in progress (its engine calls count into it)


def _generate(original):
    def generate(self, batch, repeats, sampling):
        if now:
            now[-1]["generated_prompts"] += sum(1 for r in repeats if r)
        return original(self, batch, repeats, sampling)

    return generate


def _collect(original):
    def collect(ctx, batch, samples):
        now.append({"records": [s.record.problem_id for s in samples], "generated_prompts": 0})
        try:
            return original(ctx, batch, samples)
        finally:
            seen["rounds"].append(now.pop())

    return collect


def _greedy(original):
    def greedy_baseline(ctx, step):
        engine = ctx.parts.engine
        real = engine.generate

        def generate(batch, repeats, sampling):
            seen["greedy"].append(sum(1 for r in repeats if r))
            return real(batch, repeats, sampling)

        engine.generate = generate
        try:
            return original(ctx, step)
        finally:
            del engine.generate

    return greedy_baseline


def _validation(original):
    def evaluate(engine, processor, dataset, indices, *args, **kwargs):
        seen["validation"].append(len(indices))
        return original(engine, processor, dataset, indices, *args, **kwargs)

    return evaluate


def _steps(original):
    def collect_step(*args, **kwargs):
        step = original(*args, **kwargs)
        exp = step.experience
        digest = hashlib.sha256()
        for t in (exp.ids, exp.mask, exp.offline, exp.truncated, *exp.scores.values()):
            digest.update(t.contiguous().numpy().tobytes())
        ids = [s.record.problem_id for s in step.samples]
        digest.update(json.dumps([exp.texts, exp.prompt_of, ids, exp.metrics]).encode())
        seen["steps"].append({"digest": digest.hexdigest(), "prompts": len(step.samples)})
        return step

    return collect_step


HFRolloutEngine.generate = _generate(HFRolloutEngine.generate)
rounds.collect = _collect(rollouts.collect)
rounds.greedy_baseline = _greedy(rounds.greedy_baseline)
loop.collect_step = _steps(loop.collect_step)
evaluate.evaluate = _validation(evaluate.evaluate)

if __name__ == "__main__":
    rc = main(sys.argv[2:])
    rank = int(os.environ.get("RANK", "0"))
    Path(sys.argv[1], f"rank_{rank}.json").write_text(json.dumps(seen))
    sys.exit(rc)
