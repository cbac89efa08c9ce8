"""Saving a run and resuming it: which checkpoint, what changed since it was saved, and the logs
rolled back to it. :func:`save` writes a checkpoint, :func:`restore` is its one counterpart.

- ``trainer.resume=auto`` takes the newest of the run's own checkpoints (``run_checkpoints.py``)
  that verifies (``checkpoint_check.py``); a damaged newer one is moved aside to ``step_N.damaged``
  with a message naming it and the file at fault. A ``step_*`` entry the run did not write is never
  resumed from, moved or removed: it is named and left as it is. Rank 0 decides and every rank
  follows. An explicit ``trainer.resume=PATH`` that is damaged is an error (the user asked for that
  one).
- A checkpoint of another model family or with other parameter shapes than ``model.path`` is
  refused at start-up, before any model loads (:func:`check_model_first`, from ``build.start``),
  naming what differs (``checkpoint_check.py``).
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..outdir import OutputError
from . import run_checkpoints
from .checkpoint import load_checkpoint, save_checkpoint
from .checkpoint_check import (
    CheckpointError,
    check_same_model,
    find_resumable,
    read_model_config,
    verify_checkpoint,
)
from .distributed import DistState, all_gather
from .evaluate import GENERATIONS_FILE
from .metrics import rewrite_jsonl
from .state import Components, TrainState

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


def save(cfg, parts: Components, state: TrainState) -> Path:
    """Write the checkpoint of step ``state.step`` (a collective: every rank calls it): the
    components' tensors, ``state`` and the run's settings (compared on resume)."""
    tc = cfg.trainer
    return save_checkpoint(
        tc.output_dir,
        state.step,
        parts.model,
        parts.processor,
        parts.optimizer,
        parts.scheduler,
        # the KL coefficient is state with the adaptive controller (it moves every step)
        {**state.state_dict(), "kl_coef": parts.kl_ctl.value, "settings": run_settings(cfg)},
        keep_last=tc.keep_last,
        state=parts.dist,
        reference=parts.reference_state() if state.reference_moved else None,
        export_merged=tc.export_merged,
        export_dtype=tc.export_dtype,
    )


def restore(cfg, parts: Components, n_prompts: int) -> dict[str, Any] | None:
    """Load the checkpoint ``trainer.resume`` names into ``parts`` and roll the logs back to it;
    returns its ``trainer_state.json`` for :meth:`TrainState.load_state_dict`, or None (a fresh start).

    ``n_prompts``: this run's usable training prompts (a checkpoint made with another number is
    refused). Weights, optimizer, scheduler, a warmed-up reference, the adaptive KL coefficient and
    the RNG streams are restored in place, the current optimizer settings applied, and the rollout
    engine given the weights.
    """
    tc = cfg.trainer
    ckpt = _choose_checkpoint(tc, parts.dist, parts.logger.write)
    if ckpt is None:
        return None
    meta = verify_checkpoint(ckpt)  # (its model was checked against model.path at start-up)
    changed = _check_settings(cfg, ckpt, meta, n_prompts)
    try:
        saved = load_checkpoint(
            ckpt, parts.model, parts.optimizer, parts.scheduler, parts.dist, reference=parts.reference_state()
        )
    except CheckpointError:
        raise
    except Exception as e:  # the tensors did not fit this model, or a shard failed to read
        raise CheckpointError(f"checkpoint {ckpt} could not be loaded: {type(e).__name__}: {e}") from e
    _apply_optimizer_settings(tc, parts.optimizer, parts.scheduler)
    if cfg.algorithm.kl.controller == "adaptive" and "kl_coef" in saved:
        # where the controller had moved it; a fixed coefficient is the config's (a change applies)
        parts.kl_ctl.value = float(saved["kl_coef"])
    parts.handoff.push()  # an engine with its own copy gets the restored weights
    step = saved["step"]
    if parts.dist.is_main:
        parts.logger.truncate_after(step)
        rewrite_jsonl(os.path.join(tc.output_dir, GENERATIONS_FILE), _upto(step))
        parts.skip_log.truncate_after(step)
    parts.logger.write(f"resumed from {ckpt} at step {step}")
    if changed:
        parts.logger.write(
            f"settings changed since {ckpt.name}, applied from step {step}: " + "; ".join(changed)
        )
    return saved


def check_model_first(cfg) -> None:
    """Start-up, before any weights load: the checkpoint a resume would take (``trainer.resume=PATH``,
    or with ``auto`` the newest of the run's own that verifies) is refused when its model is of
    another family or other shapes than ``model.path``'s (both ``config.json`` files compared).
    Reads only: :func:`restore` chooses again, setting damaged checkpoints aside, and says why
    a checkpoint cannot be taken."""
    tc = cfg.trainer
    if tc.resume == "never" or not cfg.model.path:
        return
    if tc.resume != "auto":
        ckpt = Path(tc.resume) if Path(tc.resume).is_dir() else None
    else:
        try:
            ckpt, _ = find_resumable(run_checkpoints.newest_first(Path(tc.output_dir) / "checkpoints"))
        except OutputError:  # an unreadable record: restore stops on it, naming it
            return
    model_config = Path(cfg.model.path) / "config.json"
    if ckpt is not None and model_config.is_file():
        check_same_model(ckpt, read_model_config(model_config))


def _choose_checkpoint(tc, dist: DistState, write: Callable[[str], None]) -> Path | None:
    """The checkpoint to resume from, the same on every rank; None starts fresh."""
    if tc.resume == "never":
        return None
    if tc.resume != "auto":
        path = Path(tc.resume)
        if not path.exists():
            raise ConfigError(f"trainer.resume={tc.resume}: no such checkpoint directory")
        try:
            verify_checkpoint(path)
        except CheckpointError as e:
            raise CheckpointError(f"trainer.resume={tc.resume} cannot be resumed from: {e}") from None
        return path
    choice, error = None, None
    if dist.is_main:
        try:
            choice, error = _choose_own_checkpoint(tc, write)
        except OutputError as e:  # an unreadable record: every rank stops, not only this one
            error = str(e)
    choice, error = all_gather((choice, error))[0]  # rank 0 decided; a file check must not split ranks
    if error:
        raise CheckpointError(error)
    return Path(choice) if choice else None


def _choose_own_checkpoint(tc, write: Callable[[str], None]) -> tuple[str | None, str | None]:
    """(the newest of the run's checkpoints that verifies, or None; why none can be resumed, or None),
    its damaged newer ones moved aside and any ``step_*`` entry the run did not write named."""
    root = Path(tc.output_dir) / "checkpoints"
    mine = run_checkpoints.newest_first(root)
    for path in run_checkpoints.foreign(root, mine):
        write(
            f"{path}: not a checkpoint this run wrote (not in {run_checkpoints.RECORD_NAME}); left as it is"
        )
    ckpt, bad = find_resumable(mine)
    for path, why in bad:
        aside = _aside(path)
        os.replace(path, aside)
        write(
            f"checkpoint {path} is damaged: {why}; moved to {aside.name}, "
            + (f"falling back to {ckpt.name}" if ckpt else "and no older checkpoint is whole")
        )
    if bad:  # the record holds the checkpoints still in place
        run_checkpoints.record(root, run_checkpoints.own(root))
    if bad and ckpt is None:
        return None, (
            f"no checkpoint in {tc.output_dir}/checkpoints is whole ({len(bad)} damaged, moved aside); "
            "set trainer.resume=never to start over"
        )
    return (str(ckpt) if ckpt else None), None


def _aside(path: Path) -> Path:
    aside, n = path.with_name(path.name + ".damaged"), 1
    while aside.exists():
        n += 1
        aside = path.with_name(f"{path.name}.damaged{n}")
    return aside


def _check_settings(cfg, ckpt: Path, meta: dict[str, Any], n_prompts: int) -> list[str]:
    """Refuse what cannot be resumed; return the ``key: old -> new`` list of what will be applied."""
    # compared as saved (through JSON), so a tuple and the list it became are equal
    saved, now = meta.get("settings", {}), json.loads(json.dumps(run_settings(cfg)))
    for key in REFUSED:
        if key in saved and saved[key] != now.get(key):
            raise ConfigError(
                f"{key} changed since checkpoint {ckpt} ({saved[key]} -> {now.get(key)}): a resumed run "
                "must keep it (the prompt order and random streams depend on it); restore it, or start a "
                "new run (another trainer.output_dir, or trainer.resume=never)"
            )
    lora_keys = ("model.lora.rank", "model.lora.alpha", "model.lora.target_modules", "model.lora.vision")
    for key in lora_keys + (("model.path",) if now.get("model.lora.rank") else ()):
        if key in saved and saved[key] != now.get(key):
            raise ConfigError(
                f"{key} changed since checkpoint {ckpt} ({saved[key]} -> {now.get(key)}): the saved LoRA "
                "adapter belongs to the old setting (and the base weights come from model.path); restore "
                "it, or start a new run (another trainer.output_dir, or trainer.resume=never)"
            )
    size = meta.get("sampler", {}).get("size")
    if size is not None and size != n_prompts:
        raise ConfigError(
            f"data.train_files: checkpoint {ckpt} was made with {size} usable training prompts, this run "
            f"has {n_prompts} (a data file, data.max_prompt_length or a record's media changed); "
            "resume with the same data, or start a new run"
        )
    return [f"{k}: {saved[k]} -> {now[k]}" for k in sorted(saved) if k in now and saved[k] != now[k]]


def _apply_optimizer_settings(tc, opt, sched) -> None:
    """Write the current lr / weight decay / betas into the restored optimizer and recompute the
    scheduled lr at the restored position (the same value when nothing changed)."""
    for group in opt.param_groups:
        group["initial_lr"] = tc.lr
        group["weight_decay"] = tc.weight_decay
        group["betas"] = tuple(tc.betas)
    sched.base_lrs = [tc.lr] * len(opt.param_groups)
    for group, factor in zip(opt.param_groups, sched.lr_lambdas, strict=True):
        group["lr"] = tc.lr * factor(sched.last_epoch)
    sched._last_lr = [group["lr"] for group in opt.param_groups]


def _upto(step: int):
    return lambda row: row.get("step", 0) <= step
