"""Resuming a run: which checkpoint, what changed since it was saved, and the logs rolled back to it.

- ``trainer.resume=auto`` takes the newest checkpoint that verifies (``checkpoint_check.py``); a
  damaged newer one is moved aside to ``step_N.damaged`` with a message naming it and the file at
  fault. Rank 0 decides and every rank follows. An explicit ``trainer.resume=PATH`` that is damaged
  is an error (the user asked for that one).
- Settings changed since the checkpoint: ``trainer.seed`` is refused (the prompt order and the RNG
  streams of the saved run depend on it), and so is a different number of usable training prompts
  (the sampler's position would point elsewhere). Everything else is applied from the restored step
  on and listed: optimizer hyper-parameters (``trainer.lr``, ``weight_decay``, ``betas``) are written
  into the restored optimizer, and the learning-rate schedule is recomputed with the current
  ``warmup_steps``, ``lr_schedule`` and ``max_steps`` (previously the checkpoint's lr silently won).
- ``metrics.jsonl``, ``generations.jsonl`` and the step rows of ``skipped_records.jsonl`` lose their
  rows past the restored step (atomically), so the steps that run again are not logged twice.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from .checkpoint import load_checkpoint
from .checkpoint_check import CheckpointError, find_resumable, verify_checkpoint
from .distributed import all_gather
from .metrics import rewrite_jsonl

REFUSED = ("trainer.seed",)
# where a run is and how it is resumed: not hyper-parameters
_NOT_SETTINGS = ("trainer.output_dir", "trainer.resume", "trainer.loggers")


def run_settings(cfg) -> dict[str, Any]:
    """The run config as flat ``{dotted.key: value}``, saved with every checkpoint."""
    flat: dict[str, Any] = {}

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        elif f"{prefix}" not in _NOT_SETTINGS:
            flat[prefix] = value

    walk("", dataclasses.asdict(cfg))
    return flat


def choose_checkpoint(trainer) -> Path | None:
    """The checkpoint to resume from, the same on every rank; None starts fresh."""
    tc = trainer.cfg.trainer
    if tc.resume == "never":
        return None
    if tc.resume != "auto":
        path = Path(tc.resume)
        if not path.exists():
            raise ValueError(f"trainer.resume={tc.resume}: no such checkpoint directory")
        try:
            verify_checkpoint(path)
        except CheckpointError as e:
            raise CheckpointError(f"trainer.resume={tc.resume} cannot be resumed from: {e}") from None
        return path
    choice, error = None, None
    if trainer.dist.is_main:
        ckpt, bad = find_resumable(tc.output_dir)
        for path, why in bad:
            aside = _aside(path)
            os.replace(path, aside)
            trainer.logger.write(
                f"checkpoint {path} is damaged: {why}; moved to {aside.name}, "
                + (f"falling back to {ckpt.name}" if ckpt else "and no older checkpoint is whole")
            )
        choice = str(ckpt) if ckpt else None
        if bad and ckpt is None:
            error = (
                f"no checkpoint in {tc.output_dir}/checkpoints is whole ({len(bad)} damaged, moved aside); "
                "set trainer.resume=never to start over"
            )
    choice, error = all_gather((choice, error))[0]  # rank 0 decided; a file check must not split ranks
    if error:
        raise CheckpointError(error)
    return Path(choice) if choice else None


def _aside(path: Path) -> Path:
    aside, n = path.with_name(path.name + ".damaged"), 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.damaged{n}")
    return aside


def check_settings(trainer, ckpt: Path, meta: dict[str, Any]) -> list[str]:
    """Refuse what cannot be resumed; return the ``key: old -> new`` list of what will be applied."""
    # compared as saved (through JSON), so a tuple and the list it became are equal
    saved, now = meta.get("settings", {}), json.loads(json.dumps(run_settings(trainer.cfg)))
    for key in REFUSED:
        if key in saved and saved[key] != now.get(key):
            raise ValueError(
                f"{key} changed since checkpoint {ckpt} ({saved[key]} -> {now.get(key)}): a resumed run "
                "must keep it (the prompt order and random streams depend on it); restore it, or start a "
                "new run (another trainer.output_dir, or trainer.resume=never)"
            )
    lora_keys = ("model.lora.rank", "model.lora.alpha", "model.lora.target_modules", "model.lora.vision")
    for key in lora_keys + (("model.path",) if now.get("model.lora.rank") else ()):
        if key in saved and saved[key] != now.get(key):
            raise ValueError(
                f"{key} changed since checkpoint {ckpt} ({saved[key]} -> {now.get(key)}): the saved LoRA "
                "adapter belongs to the old setting (and the base weights come from model.path); restore "
                "it, or start a new run (another trainer.output_dir, or trainer.resume=never)"
            )
    size = meta.get("sampler", {}).get("size")
    if size is not None and size != len(trainer.train_idx):
        raise ValueError(
            f"data.train_files: checkpoint {ckpt} was made with {size} usable training prompts, this run "
            f"has {len(trainer.train_idx)} (a data file, data.max_prompt_length or a record's media changed); "
            "resume with the same data, or start a new run"
        )
    return [f"{k}: {saved[k]} -> {now[k]}" for k in sorted(saved) if k in now and saved[k] != now[k]]


def apply_optimizer_settings(trainer) -> None:
    """Write the current lr / weight decay / betas into the restored optimizer and recompute the
    scheduled lr at the restored position (the same value when nothing changed)."""
    tc, opt, sched = trainer.cfg.trainer, trainer.optimizer, trainer.scheduler
    for group in opt.param_groups:
        group["initial_lr"] = tc.lr
        group["weight_decay"] = tc.weight_decay
        group["betas"] = tuple(tc.betas)
    sched.base_lrs = [tc.lr] * len(opt.param_groups)
    for group, factor in zip(opt.param_groups, sched.lr_lambdas, strict=True):
        group["lr"] = tc.lr * factor(sched.last_epoch)
    sched._last_lr = [group["lr"] for group in opt.param_groups]


def resume(trainer) -> None:
    """Restore ``trainer`` from its checkpoint (if any) and roll its logs back to that step."""
    ckpt = choose_checkpoint(trainer)
    if ckpt is None:
        return
    meta = verify_checkpoint(ckpt)
    changed = check_settings(trainer, ckpt, meta)
    try:
        state = load_checkpoint(
            ckpt,
            trainer.model,
            trainer.optimizer,
            trainer.scheduler,
            trainer.dist,
            reference=trainer.reference_state(),
        )
    except CheckpointError:
        raise
    except Exception as e:  # the tensors did not fit this model, or a shard failed to read
        raise CheckpointError(f"checkpoint {ckpt} could not be loaded: {type(e).__name__}: {e}") from e
    apply_optimizer_settings(trainer)
    trainer.reference_from_warmup = bool(state.get("reference_from_warmup", False))
    trainer.sync_rollout_weights()
    trainer.sampler.load_state_dict(state["sampler"])
    trainer.step, trainer.history = state["step"], state.get("history", [])
    if trainer.dist.is_main:
        trainer.logger.truncate_after(trainer.step)
        rewrite_jsonl(os.path.join(trainer.cfg.trainer.output_dir, "generations.jsonl"), _upto(trainer.step))
        trainer.skip_log.truncate_after(trainer.step)
    trainer.logger.write(f"resumed from {ckpt} at step {trainer.step}")
    if changed:
        trainer.logger.write(
            f"settings changed since {ckpt.name}, applied from step {trainer.step}: " + "; ".join(changed)
        )


def _upto(step: int):
    return lambda row: row.get("step", 0) <= step
