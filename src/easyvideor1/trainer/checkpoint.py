"""Checkpoints: a Hugging Face model directory plus the trainer state, with no pickles anywhere.

Layout of ``<output_dir>/checkpoints/step_<N>/``:
- ``model.safetensors``, ``config.json``, processor/tokenizer files: loads with ``from_pretrained``;
- ``trainer_state.safetensors``: optimizer moments and RNG states (tensors);
- ``trainer_state.json``: step, optimizer hyper-parameters, scheduler, sampler position, Python RNG,
  metrics history.
A checkpoint is written into ``step_<N>.tmp`` and renamed when complete, and ``latest`` (a text file
naming the newest step directory) is replaced atomically, so a crash mid-save leaves the previous
checkpoint in charge. Only the last ``keep_last`` are kept.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file


def _flatten_optimizer(state: dict) -> tuple[dict[str, torch.Tensor], dict]:
    tensors: dict[str, torch.Tensor] = {}
    meta_state: dict[str, dict] = {}
    for pid, st in state["state"].items():
        meta_state[str(pid)] = {}
        for k, v in st.items():
            if isinstance(v, torch.Tensor):
                tensors[f"optim.{pid}.{k}"] = v.detach().cpu().contiguous()
                meta_state[str(pid)][k] = "__tensor__"
            else:
                meta_state[str(pid)][k] = v
    return tensors, {"state": meta_state, "param_groups": state["param_groups"]}


def _unflatten_optimizer(tensors: dict[str, torch.Tensor], meta: dict) -> dict:
    state = {}
    for pid, st in meta["state"].items():
        state[int(pid)] = {k: tensors[f"optim.{pid}.{k}"] if v == "__tensor__" else v for k, v in st.items()}
    groups = [{**g, "betas": tuple(g["betas"])} if "betas" in g else g for g in meta["param_groups"]]
    return {"state": state, "param_groups": groups}


def save_checkpoint(
    output_dir: str | os.PathLike,
    step: int,
    model,
    processor,
    optimizer,
    scheduler,
    extra: dict[str, Any],
    keep_last: int = 2,
) -> Path:
    root = Path(output_dir) / "checkpoints"
    final = root / f"step_{step}"
    tmp = root / f"step_{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp)
    if processor is not None:
        processor.save_pretrained(tmp)
    tensors, optim_meta = _flatten_optimizer(optimizer.state_dict())
    tensors["rng.torch"] = torch.get_rng_state()
    save_file(tensors, str(tmp / "trainer_state.safetensors"))
    py_state = random.getstate()
    state = {
        "step": step,
        "optimizer": optim_meta,
        "scheduler": scheduler.state_dict() if scheduler is not None else None,
        "python_rng": [py_state[0], list(py_state[1]), py_state[2]],
        **extra,
    }
    (tmp / "trainer_state.json").write_text(json.dumps(state, indent=1))
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    latest_tmp = root / "latest.tmp"
    latest_tmp.write_text(final.name)
    os.replace(latest_tmp, root / "latest")
    steps = sorted(int(p.name.split("_")[1]) for p in root.glob("step_*") if p.name.split("_")[1].isdigit())
    for old in steps[:-keep_last] if keep_last > 0 else []:
        shutil.rmtree(root / f"step_{old}", ignore_errors=True)
    return final


def find_latest(output_dir: str | os.PathLike) -> Path | None:
    """The newest complete checkpoint: the one ``latest`` names, else the highest complete step."""
    root = Path(output_dir) / "checkpoints"
    latest = root / "latest"
    if latest.exists():
        path = root / latest.read_text().strip()
        if (path / "trainer_state.json").exists():
            return path
    steps = [
        p
        for p in root.glob("step_*")
        if p.name.split("_")[1].isdigit() and (p / "trainer_state.json").exists()
    ]
    return max(steps, key=lambda p: int(p.name.split("_")[1])) if steps else None


def load_model_weights(model, ckpt: str | os.PathLike) -> None:
    """Copy a checkpoint's weights into ``model``, through transformers' own loader.

    ``save_pretrained`` may store other key names than the live module uses (Qwen2/2.5-VL keep
    their pre-refactor names on disk), so reading the safetensors file directly would silently
    miss them; every key must match here.
    """
    from transformers import AutoModelForImageTextToText

    saved = AutoModelForImageTextToText.from_pretrained(ckpt, dtype=next(model.parameters()).dtype)
    model.load_state_dict(saved.state_dict(), strict=True)


def load_trainer_state(ckpt: str | os.PathLike, optimizer, scheduler) -> dict[str, Any]:
    """Restore optimizer, scheduler and RNG states; returns the JSON state (step, sampler, history)."""
    ckpt = Path(ckpt)
    state = json.loads((ckpt / "trainer_state.json").read_text())
    tensors = load_file(str(ckpt / "trainer_state.safetensors"))
    optimizer.load_state_dict(_unflatten_optimizer(tensors, state["optimizer"]))
    if scheduler is not None and state.get("scheduler") is not None:
        scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(tensors["rng.torch"])
    v, internal, gauss = state["python_rng"]
    random.setstate((v, tuple(internal), gauss))
    return state
