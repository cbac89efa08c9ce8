"""Training with open-ended answers rewarded by an endpoint judge (``reward.judge``), a real
grading server on localhost: verdicts become rewards, requests leave while later chunks of the
step still generate, and a response the judge gave no verdict on is out of its group and the loss."""

from __future__ import annotations

import json
import time

import pytest
import torch

from easyvideor1.trainer import step as stages
from easyvideor1.trainer.loop import Trainer
from tests.grading_server import GradingServer


@pytest.fixture
def open_ended_files(demo_assets):
    """The demo's records as open-ended questions: the answer is the colour's name."""
    out = {}
    for split in ("train", "val"):
        rows = [json.loads(line) for line in open(demo_assets[split])]
        for r in rows:
            r["problem_type"] = "open-ended"
            options = r.pop("options")
            r["answer"] = options["ABCD".index(r["answer"])].split(". ", 1)[1]
            r["offline_output"] = f"<answer>{r['answer']}</answer>"
        path = demo_assets["dir"] / "data" / f"{split}_open.jsonl"  # beside the videos it names
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        out[split] = path
    return out


def test_a_run_rewarded_by_the_endpoint_leaves_failed_verdicts_out(make_cfg, open_ended_files, monkeypatch):
    server = GradingServer(fail_share=0.3, think_s=0.02, pass_share=0.3)
    try:
        cfg = make_cfg(
            f"data.train_files=[{open_ended_files['train']}]",
            f"data.val_files=[{open_ended_files['val']}]",
            f"reward.judge.url={server.url}",
            "reward.judge.retries=0",
            "reward.judge.stream_chunks=2",
            "rollout.temperature=1.5",
            "trainer.max_steps=2",
        )
        captured = []
        real = stages.leave_out_unscored

        def capture(exp):
            before = exp.mask.clone()
            real(exp)
            captured.append((exp, before))

        monkeypatch.setattr(stages, "leave_out_unscored", capture)
        trainer = Trainer(cfg)
        generated = []  # when each generate call of the training steps (one chunk of prompts) ended
        first_request = []  # how many requests the server had seen when the first step started
        generate, rl_step = trainer.parts.engine.generate, trainer.rl_step

        def timed(*args, **kwargs):
            out = generate(*args, **kwargs)
            if first_request:
                generated.append(time.monotonic())
            return out

        def step():
            first_request.append(len(server.arrivals))
            return rl_step()

        monkeypatch.setattr(trainer.parts.engine, "generate", timed)
        monkeypatch.setattr(trainer, "rl_step", step)
        trainer.train()
    finally:
        server.close()
    rows = [json.loads(line) for line in open(cfg.trainer.output_dir + "/metrics.jsonl")]
    steps = [r for r in rows if "reward/judge_failures" in r and "actor/pg_loss" in r]
    assert len(steps) == 2
    failures = sum(r["reward/judge_failures"] for r in steps)
    assert failures > 0 and failures == sum(r["reward/unscored"] for r in steps)
    assert all(r["reward/judge_latency_s"] > 0 for r in steps)
    # streaming: the first chunk's requests reached the server before the second chunk of the
    # first step had been generated
    assert server.arrivals[first_request[0]][0] < generated[1]
    for exp, before in captured:
        assert exp.unscored is not None and bool(exp.unscored.any())
        out = exp.unscored
        assert torch.all(exp.advantages[out] == 0)  # not in its group's statistics: no advantage
        assert torch.all(exp.mask[out] == 0) and torch.all(exp.mask[~out] == before[~out])  # nor in the loss
        assert exp.valid is not None and torch.equal(exp.valid, before)  # still attended in the forward
        # the scored rows' advantages are their group's statistics over the scored rows only
        scores = exp.scores["overall"]
        checked = 0
        for p in set(exp.prompt_of):
            idx = [i for i, q in enumerate(exp.prompt_of) if q == p and not out[i]]
            if len(idx) > 1 and float(scores[idx].std()) > 0:
                first = exp.advantages[idx[0]][before[idx[0]].bool()][0]
                # GRPO with the group's population std (``algorithms.advantages.group_normalize``)
                expected = (scores[idx[0]] - scores[idx].mean()) / (scores[idx].std(correction=0) + 1e-6)
                assert float(first) == pytest.approx(float(expected), abs=1e-4)
                checked += 1
        assert checked > 0
    validation = [r for r in rows if "val/accuracy" in r]
    assert validation and all(0.0 <= r["val/accuracy"] <= 1.0 for r in validation)
