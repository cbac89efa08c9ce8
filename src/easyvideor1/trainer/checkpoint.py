"""Checkpoints: a Hugging Face model export plus a sharded training state, with no pickles anywhere.

Layout of ``<output_dir>/checkpoints/step_<N>/``:
- ``model.safetensors``, ``config.json``, processor/tokenizer files: the full model, written by rank 0,
  loads with ``from_pretrained`` (evaluate it, serve it, or start a new run from it);
- with LoRA (``model.lora``) instead: ``adapter/`` in PEFT's format (``PeftModel.from_pretrained(base,
  ckpt/adapter)``), the processor files, and with ``trainer.export_merged`` ``merged/``, the adapter
  merged into the base weights as a plain model directory. ``sharded/`` then holds only the adapter
  and its optimizer state: the frozen base weights come back from ``model.path`` on resume;
- ``sharded/``: model weights and optimizer moments as written by every rank
  (``torch.distributed.checkpoint`` with its Hugging Face storage: safetensors files whose headers
  record each shard's offsets), so a run resumes on *any* number of ranks, DCP resharding on load;
- ``rng/rank_<R>.safetensors``: each rank's torch RNG state;
- ``trainer_state.json``: step, world size, optimizer hyper-parameters, scheduler, sampler position,
  Python RNG, metrics history, the run's settings;
- ``checkpoint_files.json``: every file's size, so a damaged checkpoint is recognised before it is
  loaded (``checkpoint_check.py``) and resuming falls back to the newest whole one.
Every rank writes into ``step_<N>.tmp``; after a barrier rank 0 renames it and replaces ``latest``
atomically, so a crash mid-save leaves the previous checkpoint in charge. The run records the
checkpoints it wrote in ``checkpoints/saved.json`` and keeps the last ``keep_last`` of those; a
folder it did not write is never replaced or removed (``run_checkpoints.py``). (The reference saved
per-rank pickles that could only resume on the same number of ranks, and executed them on load.)
"""

from __future__ import annotations

import json
import os
import random
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from ..models.loading import DTYPES
from ..models.lora import is_lora, save_adapter, save_merged
from ..models.released import write_released_layout
from ..outdir import OutputError
from . import run_checkpoints
from .checkpoint_check import CheckpointError, read_state, record_files
from .distributed import DistState, all_gather, barrier

# DCP warns that it "assumes a single process" whenever no process group exists: that is our intent
warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")


def _state_dict_api():
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    return (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )


def _training_state(model, optimizer) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(tensors keyed ``model.<fqn>`` / ``optim.<key>``, optimizer non-tensor values) of this rank."""
    options, get_model, get_optim, _, _ = _state_dict_api()
    # LoRA: the frozen base weights are model.path's; only the adapter is training state
    frozen_out = options(ignore_frozen_params=is_lora(model))
    tensors = {f"model.{k}": v for k, v in get_model(model, options=frozen_out).items()}
    plain: dict[str, Any] = {}
    for k, v in get_optim(model, optimizer, options=options(flatten_optimizer_state_dict=True)).items():
        if isinstance(v, torch.Tensor):
            tensors[f"optim.{k}"] = v
        else:
            plain[k] = list(v) if isinstance(v, tuple) else v
    return tensors, plain


def save_checkpoint(
    output_dir: str | os.PathLike,
    step: int,
    model,
    processor,
    optimizer,
    scheduler,
    extra: dict[str, Any],
    keep_last: int = 2,
    state: DistState | None = None,
    reference=None,
    export_merged: bool = False,
    export_dtype: str | None = None,
) -> Path:
    """Write step ``step``'s checkpoint (a collective under torchrun: every rank calls it).

    ``reference``: a KL reference policy that differs from the starting model (it was taken after the
    supervised warm-up), saved sharded under ``reference/`` so that a resumed run gets it back: a
    model, or with LoRA the snapshot of the warmed-up adapter (a dict of tensors).
    ``export_merged``: with LoRA, also write ``merged/`` (a plain Hugging Face model directory).
    ``export_dtype``: the dtype of the Hugging Face weights written (None: the master weights';
    the sharded training state always keeps them exact).
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageWriter

    state = state or DistState()
    root = Path(output_dir) / "checkpoints"
    final, tmp = root / f"step_{step}", root / f"step_{step}.tmp"
    refused = None
    if state.is_main:
        try:
            run_checkpoints.prepare(root, step)
        except OutputError as e:
            refused = (str(e), e.exit_code)
    refused = all_gather(refused)[0]  # every rank stops, not only the one that checked
    if refused:
        raise OutputError(*refused)
    options, get_model, _, _, _ = _state_dict_api()
    lora = is_lora(model)
    # rank 0 holds it (with LoRA only the adapter: the base weights are not gathered)
    full = get_model(
        model, options=options(full_state_dict=True, cpu_offload=True, ignore_frozen_params=lora)
    )
    tensors, optim_plain = _training_state(model, optimizer)
    dcp.save(
        tensors, storage_writer=HuggingFaceStorageWriter(path=str(tmp / "sharded"), save_distributed=True)
    )
    if reference is not None:
        _, get_model, _, _, _ = _state_dict_api()
        writer = HuggingFaceStorageWriter(path=str(tmp / "reference"), save_distributed=True)
        ref = dict(reference) if isinstance(reference, dict) else dict(get_model(reference))
        dcp.save(ref, storage_writer=writer)
    if lora and export_merged:  # a collective (weights merged layer by layer); rank 0 writes
        save_merged(model, tmp / "merged", processor, is_main=state.is_main)
    rng = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():  # GPU sampling draws from the CUDA generator
        rng["cuda"] = torch.cuda.get_rng_state()
    save_file(rng, str(tmp / "rng" / f"rank_{state.rank}.safetensors"))
    if state.is_main:
        if lora:
            _quietly(save_adapter, model, tmp / "adapter", full)
        else:
            save_hf_weights(model, tmp, full, export_dtype)
        if processor is not None:
            processor.save_pretrained(tmp)
        py_state = random.getstate()
        meta = {
            "step": step,
            "world_size": state.world,
            "optimizer": optim_plain,
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "python_rng": [py_state[0], list(py_state[1]), py_state[2]],
            **extra,
        }
        (tmp / "trainer_state.json").write_text(json.dumps(meta, indent=1))
    barrier()  # every rank's shards are on disk before the checkpoint is published
    if state.is_main:
        record_files(tmp)
        run_checkpoints.publish(root, tmp, final, keep_last)
    barrier()
    return final


def export_model(model, processor, directory: str | os.PathLike, state: DistState | None = None) -> Path:
    """The current weights as a plain Hugging Face model directory (with LoRA: the adapter merged
    into the base weights), written to ``directory.tmp`` and renamed, so a reader never sees half
    of one. A collective under torchrun: every rank calls it, rank 0 writes."""
    state = state or DistState()
    final = Path(directory)
    tmp = final.with_name(final.name + ".tmp")
    if state.is_main:
        run_checkpoints.clear_scratch(tmp)
        tmp.mkdir(parents=True)
    barrier()
    if is_lora(model):
        save_merged(model, tmp, processor, is_main=state.is_main)
    else:
        options, get_model, _, _, _ = _state_dict_api()
        full = get_model(model, options=options(full_state_dict=True, cpu_offload=True))
        if state.is_main:
            _quietly(model.save_pretrained, tmp, state_dict=full)
            write_released_layout(tmp)
            if processor is not None:
                processor.save_pretrained(tmp)
    if state.is_main:
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    barrier()
    return final


def save_hf_weights(model, directory: Path, full: dict[str, torch.Tensor], dtype: str | None) -> None:
    """``model.save_pretrained`` of the full state dict ``full``, its floating tensors (and the
    config's ``dtype``) in ``dtype`` when given, in the released tensor layout."""
    if dtype is not None:
        cast = DTYPES[dtype]
        full = {k: v.to(cast) if v.is_floating_point() else v for k, v in full.items()}
        before, model.config.dtype = model.config.dtype, cast
    try:
        _quietly(model.save_pretrained, directory, state_dict=full)  # no progress bar per checkpoint
    finally:
        if dtype is not None:
            model.config.dtype = before
    write_released_layout(directory)


def _quietly(fn, *args, **kwargs):
    from transformers.utils import logging as hf_logging

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        return fn(*args, **kwargs)
    finally:
        if shown:
            hf_logging.enable_progress_bar()


def load_checkpoint(
    ckpt: str | os.PathLike, model, optimizer, scheduler, state: DistState | None = None, reference=None
) -> dict[str, Any]:
    """Restore weights, optimizer, scheduler and RNG states (resharding to this run's ranks), and the
    KL ``reference`` policy when the checkpoint holds one.

    Returns the JSON state (step, sampler, history). A rank without a saved RNG state (the run was
    saved on fewer ranks) reseeds from the step and its rank, and says so.
    """
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import HuggingFaceStorageReader

    state = state or DistState()
    ckpt = Path(ckpt)
    meta = read_state(ckpt)  # a damaged file is an error naming it
    if not (ckpt / "sharded").is_dir():
        raise CheckpointError(f"{ckpt}: no sharded/ training state (not a resumable easyvideor1 checkpoint)")
    options, _, get_optim, set_model, set_optim = _state_dict_api()
    tensors, _ = _training_state(model, optimizer)  # the shapes and placements to load into
    dcp.load(tensors, storage_reader=HuggingFaceStorageReader(path=str(ckpt / "sharded")))
    weights = {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}
    if is_lora(model):  # the adapter alone; the frozen base weights stay as loaded
        set_model(model, weights, options=options(strict=False, ignore_frozen_params=True))
    else:
        set_model(model, weights)
    optim = {k[6:]: v for k, v in tensors.items() if k.startswith("optim.")}
    for k, v in meta["optimizer"].items():
        optim[k] = tuple(v) if k.endswith(".betas") else v
    set_optim(model, optimizer, optim, options=options(flatten_optimizer_state_dict=True))
    if scheduler is not None and meta.get("scheduler") is not None:
        scheduler.load_state_dict(meta["scheduler"])
    if reference is not None and (ckpt / "reference").is_dir():
        if isinstance(reference, dict):  # LoRA: the warmed-up adapter snapshot, loaded in place
            dcp.load(reference, storage_reader=HuggingFaceStorageReader(path=str(ckpt / "reference")))
        else:
            ref = dict(_state_dict_api()[1](reference))
            dcp.load(ref, storage_reader=HuggingFaceStorageReader(path=str(ckpt / "reference")))
            set_model(reference, ref)
    rng = ckpt / "rng" / f"rank_{state.rank}.safetensors"
    if rng.exists():
        saved = load_file(str(rng))
        torch.set_rng_state(saved["torch"])
        if "cuda" in saved and torch.cuda.is_available():
            torch.cuda.set_rng_state(saved["cuda"])
    else:
        torch.manual_seed(1_000_003 * state.rank + meta["step"])
        print(
            f"rank {state.rank}: {ckpt} holds no RNG state for this rank (saved on {meta.get('world_size')}); reseeded"
        )
    v, internal, gauss = meta["python_rng"]
    random.setstate((v, tuple(internal), gauss))
    return meta


def load_model_weights(model, ckpt: str | os.PathLike) -> None:
    """Copy an exported model directory's weights into an (unsharded) ``model``, via transformers.

    ``save_pretrained`` may store other key names than the live module uses (Qwen2/2.5-VL keep
    their pre-refactor names on disk), so reading the safetensors file directly would silently
    miss them; every key must match here.
    """
    from transformers import AutoModelForImageTextToText

    saved = AutoModelForImageTextToText.from_pretrained(ckpt, dtype=next(model.parameters()).dtype)
    model.load_state_dict(saved.state_dict(), strict=True)
