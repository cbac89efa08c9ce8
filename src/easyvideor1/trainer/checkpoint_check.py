"""Is a checkpoint whole? Checked before resuming from it, so a damaged one is passed over.

A checkpoint directory is published only after every rank wrote it (``checkpoint.py``), but a
file can still be damaged later: a disk that filled up, a copy cut short, a hand edit. Resuming
from such a checkpoint used to end in an ``AssertionError`` deep in the tensor reader (a truncated
shard) or a JSON error that named no file. Here, before anything is loaded:

- ``trainer_state.json`` must parse as a JSON object with a whole ``step`` >= 0;
- ``sharded/`` (the resumable training state) must exist;
- every file listed in ``checkpoint_files.json`` (names and sizes recorded at save time) must be
  there with its size;
- every ``.safetensors`` file must have a readable header whose tensors end exactly at the end of
  the file (what a truncated or padded file fails).

Before any model is loaded, :func:`check_same_model` compares the checkpoint's ``config.json`` with
``model.path``'s (``resume.check_model_first``, at start-up): another family or other parameter
shapes (a new ``model.path``, or ``trainer.resume=PATH`` of another run) is refused, naming what
differs, so a mismatch costs no model load.

This reads headers and sizes only (milliseconds for any model size); it does not hash tensor
bytes, so bytes flipped in place inside a tensor are not detected.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..outdir import write_text_atomic

FILES_LIST = "checkpoint_files.json"
_MAX_HEADER = 100 * 1024 * 1024  # safetensors' own limit on the JSON header


class CheckpointError(UserError):
    """A checkpoint that cannot be resumed from; the message names the checkpoint and the file."""


def record_files(ckpt: str | os.PathLike) -> None:
    """Write ``checkpoint_files.json``: every file of the checkpoint with its size (rank 0, after the
    barrier that ends the save, before the directory is published)."""
    root = Path(ckpt)
    sizes = {
        str(p.relative_to(root)): p.stat().st_size
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != FILES_LIST
    }
    write_text_atomic(root / FILES_LIST, json.dumps(sizes, indent=0))


def read_state(ckpt: str | os.PathLike) -> dict[str, Any]:
    """``trainer_state.json`` as a dict, or a CheckpointError naming the file."""
    path = Path(ckpt) / "trainer_state.json"
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{path}: missing") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: unreadable ({e})") from None
    step = meta.get("step") if isinstance(meta, dict) else None
    if not isinstance(step, int) or isinstance(step, bool):
        raise CheckpointError(f"{path}: not a trainer state (no integer 'step')")
    if step < 0:
        raise CheckpointError(f"{path}: step must be >= 0, got {step}")
    return meta


def check_same_model(ckpt: str | os.PathLike, model_config: dict[str, Any]) -> None:
    """A CheckpointError naming what differs when the checkpoint's exported model (its
    ``config.json``) is another family or has other parameter shapes than ``model_config`` (the
    run's model, ``config.to_dict()``); loading its tensors would fail with a traceback. A
    checkpoint without ``config.json`` (a LoRA adapter) is left to the LoRA settings check."""
    path = Path(ckpt) / "config.json"
    if not path.is_file():
        return
    saved = read_model_config(path)
    family, now = saved.get("model_type"), model_config.get("model_type")
    if family != now:
        raise CheckpointError(
            f"{path}: the checkpoint is a {family} model, this run's model.path is {now}; resume with "
            "the model it was trained from, or start a new run (trainer.resume=never)"
        )
    was, shapes = _shape_settings(saved), _shape_settings(model_config)
    differ = [
        f"{key} {was[key]} -> {shapes[key]}"
        for key in sorted(was)
        if key in shapes and was[key] != shapes[key]
    ]
    if differ:
        raise CheckpointError(
            f"{path}: the checkpoint's parameter shapes differ from this run's model.path "
            f"({'; '.join(differ)}); resume with the model it was trained from, or start a new run "
            "(trainer.resume=never)"
        )


def read_model_config(path: str | os.PathLike) -> dict[str, Any]:
    """A model's ``config.json`` as a dict (no weights are read), or a CheckpointError naming it."""
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: unreadable ({e})") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: not a model config (a JSON object)")
    return config


# the config keys that set parameter shapes, in any sub-config (text_config, vision_config, ...)
_SHAPE_KEYS = frozenset(
    (
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "vocab_size",
        "depth",
        "embed_dim",
        "patch_size",
    )
)


def _shape_settings(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{dotted key: value}`` of the shape-setting keys of a model config and its sub-configs."""
    found = {}
    for key, value in config.items():
        if isinstance(value, dict):
            found.update(_shape_settings(value, f"{prefix}{key}."))
        elif key in _SHAPE_KEYS:
            found[prefix + key] = value
    return found


def check_safetensors(path: str | os.PathLike) -> str | None:
    """Why a safetensors file is damaged, or None: header length, header JSON, tensor extents."""
    size = os.path.getsize(path)
    try:
        with open(path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                return f"{size} bytes, shorter than a header"
            n = int.from_bytes(head, "little")
            if n > min(size - 8, _MAX_HEADER):
                return f"header length {n} exceeds the file ({size} bytes)"
            header = json.loads(f.read(n))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        return f"unreadable header ({e})"
    if not isinstance(header, dict):
        return "header is not a JSON object"
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if not (isinstance(offsets, list) and len(offsets) == 2):
            return f"tensor {name!r} has no data_offsets"
        end = max(end, int(offsets[1]))
    if 8 + n + end != size:
        return f"{size} bytes, but its tensors end at byte {8 + n + end} (truncated or damaged)"
    return None


def verify_checkpoint(ckpt: str | os.PathLike) -> dict[str, Any]:
    """The checkpoint's trainer state if the checkpoint looks whole; else a CheckpointError saying
    which file is wrong and how."""
    root = Path(ckpt)
    if not root.is_dir():
        raise CheckpointError(f"{root}: not a checkpoint directory")
    meta = read_state(root)
    if not (root / "sharded").is_dir():
        raise CheckpointError(f"{root}: no sharded/ training state (not a resumable easyvideor1 checkpoint)")
    listed = root / FILES_LIST
    if listed.exists():
        try:
            sizes = json.loads(listed.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CheckpointError(f"{listed}: unreadable ({e})") from None
        for rel, size in sizes.items():
            p = root / rel
            if not p.is_file():
                raise CheckpointError(f"{p}: missing (written at save time)")
            if p.stat().st_size != size:
                raise CheckpointError(f"{p}: {p.stat().st_size} bytes, written as {size}")
    for p in sorted(root.rglob("*.safetensors")):
        problem = check_safetensors(p)
        if problem:
            raise CheckpointError(f"{p}: {problem}")
    return meta


def find_resumable(checkpoints: list[Path]) -> tuple[Path | None, list[tuple[Path, str]]]:
    """(the first of ``checkpoints`` that verifies, or None; [(damaged checkpoint, why)] passed over)."""
    bad = []
    for ckpt in checkpoints:
        try:
            verify_checkpoint(ckpt)
        except CheckpointError as e:
            bad.append((ckpt, str(e)))
            continue
        return ckpt, bad
    return None, bad
