"""Metrics sinks: console (progress bar), JSONL, TensorBoard, and wandb when installed."""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import torch

from ..outdir import make_dir, open_append, refuse_link, replacing
from .experience import Experience


class MetricsLogger:
    def __init__(self, output_dir: str, loggers: list[str], config: dict | None = None, total_steps: int = 0):
        os.makedirs(output_dir, exist_ok=True)
        self.jsonl_path = os.path.join(output_dir, "metrics.jsonl")
        self.jsonl = open_append(self.jsonl_path) if "jsonl" in loggers else None
        self.tb = None
        if "tensorboard" in loggers:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(make_dir(os.path.join(output_dir, "tensorboard"))))
            except ImportError:
                print("tensorboard is not installed: skipping the tensorboard logger")
        self.wandb = None
        if "wandb" in loggers:
            try:
                import wandb

                make_dir(os.path.join(output_dir, "wandb"))  # the folder wandb writes its run into
                self.wandb = wandb.init(project="easyvideor1", dir=output_dir, config=config or {})
            except ImportError:
                print("wandb is not installed: skipping the wandb logger")
        self.bar = None
        if "console" in loggers:
            from tqdm import tqdm

            self.bar = tqdm(total=total_steps, desc="train", unit="step", dynamic_ncols=True)

    def log(
        self, step: int, metrics: dict[str, Any], console_keys: tuple[str, ...] = (), late: bool = False
    ) -> None:
        """One row of metrics at ``step``. ``late``: the step is past (a background evaluation
        that finished since): wandb, whose steps only go forward, gets it against ``eval/step``."""
        clean = {
            k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(float(v))
        }
        if self.jsonl:
            self.jsonl.write(json.dumps({"step": step, **clean}) + "\n")
            self.jsonl.flush()
        if self.tb:
            for k, v in clean.items():
                self.tb.add_scalar(k, v, step)
        if self.wandb and late:
            self.wandb.define_metric("eval/*", step_metric="eval/step")
            self.wandb.log({**clean, "eval/step": step})
        elif self.wandb:
            self.wandb.log(clean, step=step)
        if self.bar is not None and not late:
            self.bar.n = step
            self.bar.set_postfix(
                {k.split("/")[-1]: f"{clean[k]:.3g}" for k in console_keys if k in clean}, refresh=True
            )

    def truncate_after(self, step: int) -> None:
        """Drop ``metrics.jsonl`` rows past ``step`` (a resume from ``step`` logs them again)."""
        if self.jsonl is None:
            return
        self.jsonl.close()
        rewrite_jsonl(self.jsonl_path, lambda row: row.get("step", 0) <= step)
        self.jsonl = open_append(self.jsonl_path)

    def write(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text)
        else:
            print(text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.jsonl:
            self.jsonl.close()
        if self.tb:
            self.tb.close()
        if self.wandb:
            self.wandb.finish()


def rewrite_jsonl(path: str, keep: Callable[[dict], bool]) -> int:
    """Keep only the rows of a JSONL file that ``keep`` accepts; returns how many were dropped.

    Atomic: the kept rows go to a temporary file that replaces the original, so a crash leaves
    either the old or the new file (``outdir.replacing``: a symbolic link at ``path`` is refused,
    naming it). A line that is not a JSON object (a row cut off by a crash) is dropped too. A
    missing file is left missing.
    """
    refuse_link(path)
    if not os.path.exists(path):
        return 0
    kept, dropped = [], 0
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                row = None
            if isinstance(row, dict) and keep(row):
                kept.append(line if line.endswith("\n") else line + "\n")
            elif line.strip():
                dropped += 1
    if not dropped:
        return 0
    with replacing(path) as f:
        f.writelines(kept)
    return dropped


def reward_metrics(exp: Experience) -> dict[str, float]:
    """Mean reward, accuracy and format overall and per task type (over the responses that have a
    reward); response length and truncation."""
    m: dict[str, float] = {}
    by_task: dict[str, list[int]] = defaultdict(list)
    scored = [True] * len(exp.tasks) if exp.unscored is None else (~exp.unscored).tolist()
    for i, t in enumerate(exp.tasks):
        if scored[i]:
            by_task[t].append(i)
    rows = [i for i, ok in enumerate(scored) if ok]
    for key, v in exp.scores.items():
        m[f"reward/{key}"] = float(v[rows].mean()) if rows else 0.0
        for t, idx in by_task.items():
            m[f"reward/{t}/{key}"] = float(v[idx].mean())
    m["response/length"] = float(exp.mask.sum(1).float().mean())
    m["response/truncated"] = float(exp.truncated.float().mean())
    return m


def hybrid_metrics(exp: Experience) -> dict[str, float]:
    """Online versus offline responses: accuracy, advantage and length."""
    m: dict[str, float] = {}
    seq_adv = (exp.advantages * exp.mask).sum(1) / exp.mask.sum(1).clamp(min=1)
    for name, sel in (("online", ~exp.offline), ("offline", exp.offline)):
        if sel.any():
            m[f"hybrid/{name}_accuracy"] = float(exp.scores["accuracy"][sel].mean())
            m[f"hybrid/{name}_advantage"] = float(seq_adv[sel].mean())
            m[f"hybrid/{name}_length"] = float(exp.mask[sel].sum(1).float().mean())
    m["hybrid/offline_truncated"] = float((exp.truncated & exp.offline).sum())
    return m


# ------------------------------------------------------------------------------- warm-up, eval


def mismatch_metrics(exp: Experience) -> dict[str, float]:
    """Training/inference mismatch: |trainer log-prob - engine log-prob| over sampled tokens.

    Near zero when the engine runs the trainer's weights (1e-6 in fp32 on the tiny model); a stale
    weight sync shows up here at once. With top-k / top-p the engine's log-probs are those of the
    truncated distribution, so the gap also includes that renormalisation.
    """
    if exp.rollout_logp is None:
        return {}
    valid = exp.mask.bool() & ~torch.isnan(exp.rollout_logp)
    if not valid.any():
        return {}
    gap = (exp.old_logp - exp.rollout_logp).abs()[valid]
    return {"rollout/logprob_gap_mean": float(gap.mean()), "rollout/logprob_gap_max": float(gap.max())}
