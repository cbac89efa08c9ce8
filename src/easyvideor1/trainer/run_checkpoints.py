"""Which checkpoints are the run's own: the ``<output_dir>/checkpoints/step_<N>`` folders it wrote,
so that a save, ``keep_last`` rotation and ``resume=auto`` touch those and nothing else.

An output directory may hold other things: a user's ``checkpoints/step_0/``, a ``step_7`` copied
from elsewhere, a folder named ``step_²``, a planted symbolic link. So the run records the name of
every checkpoint it publishes, in save order, in ``checkpoints/saved.json`` (replaced atomically,
right after the checkpoint is renamed into place), and :func:`own` reads the record back:

- only names ``step_<ASCII digits>`` count (:func:`step_of`; ``int()`` would also read the Unicode
  digits of ``step_²`` or ``step_٣``), so an edited record cannot name ``../elsewhere``, and only real
  directories, never a symbolic link;
- :func:`publish` rotates by save order: it removes the oldest recorded checkpoints beyond
  ``keep_last``, never the one just written (``latest`` always names a checkpoint on disk) and never
  a folder the record does not hold;
- :func:`prepare` refuses to replace a ``step_N`` the run did not write, and clears the scratch
  folder ``step_N.tmp`` without following a link there (a link is removed itself, never its target);
- ``resume=auto`` resumes from recorded checkpoints only, and names the ``step_*`` entries it leaves
  alone (:func:`foreign`, ``resume.py``).

Output directories written before the record existed have ``checkpoints/latest`` and no
``saved.json``: there the ``step_N`` folders holding ``trainer_state.json`` or
``checkpoint_files.json`` (files every save writes) are taken as the run's, and the next save
writes the record.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

from ..outdir import OutputError, create_file, reason, write_text_atomic, writing

RECORD_NAME = "saved.json"
LATEST_NAME = "latest"
_STEP = re.compile(r"step_([0-9]+)", re.ASCII)
_SAVE_MARKS = ("trainer_state.json", "checkpoint_files.json")


def step_of(name: str) -> int | None:
    """N of a checkpoint folder's name ``step_N`` (ASCII digits only); None for any other name."""
    match = _STEP.fullmatch(name)
    return int(match.group(1)) if match else None


def _is_checkpoint_dir(path: Path) -> bool:
    return step_of(path.name) is not None and not path.is_symlink() and path.is_dir()


def own(root: Path) -> list[Path]:
    """The run's checkpoints under ``root`` (``<output_dir>/checkpoints``), oldest save first."""
    record = root / RECORD_NAME
    if record.is_file():
        try:
            names = json.loads(record.read_text(encoding="utf-8")).get("checkpoints", [])
        except (OSError, ValueError, AttributeError) as e:
            raise OutputError(f"{record}: unreadable ({e}); move it away to start a new run here") from None
        if not isinstance(names, list):
            raise OutputError(f"{record}: 'checkpoints' is not a list; move it away to start a new run here")
        paths = [root / name for name in dict.fromkeys(n for n in names if isinstance(n, str))]
        return [p for p in paths if _is_checkpoint_dir(p)]
    if not (root / LATEST_NAME).is_file():
        return []
    # written before the record existed: every folder holding a save's own files, by step
    earlier = [
        p
        for p in root.glob("step_*")
        if _is_checkpoint_dir(p) and any((p / m).is_file() for m in _SAVE_MARKS)
    ]
    return sorted(earlier, key=lambda p: step_of(p.name))


def newest_first(root: Path) -> list[Path]:
    """The run's checkpoints to resume from, newest first: the one ``latest`` names, then by step."""
    mine = sorted(own(root), key=lambda p: step_of(p.name), reverse=True)
    latest = root / LATEST_NAME
    named = root / latest.read_text(encoding="utf-8").strip() if latest.is_file() else None
    if named in mine:
        mine.remove(named)
        mine.insert(0, named)
    return mine


def foreign(root: Path, mine: list[Path]) -> list[Path]:
    """Entries under ``root`` named like a checkpoint (``step_*``, not the run's ``.tmp`` scratch or
    ``.damaged`` set-asides) that the run did not write: left alone, and named when resuming."""
    return sorted(p for p in root.glob("step_*") if "." not in p.name and p not in mine)


def record(root: Path, mine: list[Path]) -> None:
    """Write ``saved.json``: the names of ``mine``, the run's checkpoints, oldest save first."""
    write_text_atomic(
        root / RECORD_NAME, json.dumps({"checkpoints": [p.name for p in mine]}, indent=1) + "\n"
    )


def prepare(root: Path, step: int) -> Path:
    """Make the empty scratch folder ``step_<step>.tmp`` that every rank writes the checkpoint into
    (rank 0, before the save). Refuses, naming it, a ``step_<step>`` the run did not write."""
    final, tmp = root / f"step_{step}", root / f"step_{step}.tmp"
    if (final.exists() or final.is_symlink()) and final not in own(root):
        raise OutputError(
            f"{final}: exists and is not a checkpoint this run wrote (not in {root / RECORD_NAME}); "
            "move it away or choose another trainer.output_dir"
        )
    clear_scratch(tmp)
    with writing(tmp):
        (tmp / "rng").mkdir(parents=True)
    return tmp


def clear_scratch(tmp: Path) -> None:
    """Make way for the scratch folder ``tmp`` (a ``.tmp`` name the run writes into and renames):
    a symbolic link or file there is removed itself, never its target; a folder left by a write
    that did not finish is removed."""
    with writing(tmp):
        if tmp.is_symlink() or (tmp.exists() and not tmp.is_dir()):
            tmp.unlink()
        elif tmp.exists():
            shutil.rmtree(tmp)


def publish(root: Path, tmp: Path, final: Path, keep_last: int) -> None:
    """Rename the finished ``tmp`` to ``final``, point ``latest`` at it, record it as the run's, and
    remove the run's oldest checkpoints beyond ``keep_last`` (0 keeps every one)."""
    mine = [p for p in own(root) if p != final] + [final]  # read before ``latest`` exists
    with writing(final):
        if final.is_dir() and not final.is_symlink():  # the run's own (``prepare`` checked)
            shutil.rmtree(final)
        os.replace(tmp, final)
    latest_tmp = root / f"{LATEST_NAME}.tmp"
    with writing(root / LATEST_NAME):
        create_file(latest_tmp, final.name.encode())
        os.replace(latest_tmp, root / LATEST_NAME)
    record(root, mine)
    if keep_last <= 0 or len(mine) <= keep_last:
        return
    left = []
    for old in mine[:-keep_last]:
        try:
            shutil.rmtree(old)
        except OSError as e:  # left recorded: the next save tries again
            print(f"warning: could not remove old checkpoint {old}: {reason(e)}", file=sys.stderr)
            left.append(old)
    record(root, left + mine[-keep_last:])
