"""A run saves, rotates and resumes only the checkpoints it wrote (``run_checkpoints.py``): folders
of other origin in its output directory (a user's ``step_0``, a later-sorting ``step_7``, a
``step_²``, planted symbolic links) are never replaced, removed, renamed or written through.

The saves here are what ``save_checkpoint`` does on rank 0 around the tensors (prepare the scratch
folder, write a trainer state, record the files, publish), on real folders and links."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from easyvideor1.outdir import OutputError
from easyvideor1.trainer import run_checkpoints
from easyvideor1.trainer.checkpoint_check import record_files
from easyvideor1.trainer.distributed import DistState
from easyvideor1.trainer.resume import _choose_checkpoint


def _save(out: Path, step: int, keep_last: int = 2) -> Path:
    root = out / "checkpoints"
    tmp = run_checkpoints.prepare(root, step)
    (tmp / "trainer_state.json").write_text(json.dumps({"step": step}))
    (tmp / "sharded").mkdir()
    record_files(tmp)
    final = root / f"step_{step}"
    run_checkpoints.publish(root, tmp, final, keep_last)
    return final


def _user_folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "notes.txt").write_text("mine\n")
    return path


def _outside(tmp_path: Path) -> Path:
    """A folder outside the output directory, with a file a link may point at."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.txt").write_text("keep me\n")
    return elsewhere


@pytest.mark.parametrize(
    "planted",
    ["user_step_0", "later_step_7", "unicode_digit_step", "copied_checkpoint", "symlinked_step"],
)
def test_rotation_keeps_the_newest_own_checkpoint_and_touches_nothing_else(tmp_path, planted):
    out, elsewhere = tmp_path / "run", _outside(tmp_path)
    ckpts = out / "checkpoints"
    if planted == "user_step_0":
        foreign = _user_folder(ckpts / "step_0")
    elif planted == "later_step_7":
        foreign = _user_folder(ckpts / "step_7")
    elif planted == "unicode_digit_step":  # int("²") fails, int("٣") is 3: neither is a step
        foreign = _user_folder(ckpts / "step_²")
        _user_folder(ckpts / "step_٣")
    elif planted == "copied_checkpoint":  # another run's checkpoint copied in: still not this run's
        foreign = _user_folder(ckpts / "step_9")
        (foreign / "trainer_state.json").write_text('{"step": 9}')
    else:
        ckpts.mkdir(parents=True)
        foreign = ckpts / "step_8"
        foreign.symlink_to(elsewhere, target_is_directory=True)
    for step in (1, 2, 3):
        _save(out, step, keep_last=1)

    assert (ckpts / "latest").read_text() == "step_3" and (ckpts / "step_3" / "trainer_state.json").is_file()
    assert not (ckpts / "step_1").exists() and not (ckpts / "step_2").exists()
    assert json.loads((ckpts / run_checkpoints.RECORD_NAME).read_text()) == {"checkpoints": ["step_3"]}
    if planted == "symlinked_step":
        assert foreign.is_symlink()
    else:
        assert (foreign / "notes.txt").read_text() == "mine\n"
    assert sorted(os.listdir(elsewhere)) == ["precious.txt"]
    assert (elsewhere / "precious.txt").read_text() == "keep me\n"


def test_a_save_refuses_to_replace_a_step_folder_it_did_not_write(tmp_path):
    out = tmp_path / "run"
    foreign = _user_folder(out / "checkpoints" / "step_2")
    _save(out, 1)
    with pytest.raises(OutputError, match=r"step_2: exists and is not a checkpoint this run wrote") as e:
        _save(out, 2)
    assert e.value.exit_code == 2 and "\n" not in str(e.value)
    assert sorted(os.listdir(foreign)) == ["notes.txt"]
    assert (out / "checkpoints" / "latest").read_text() == "step_1"


@pytest.mark.parametrize("link", ["step_1.tmp", "latest.tmp", ".saved.json.tmp"])
def test_a_planted_link_at_a_scratch_name_is_not_written_through(tmp_path, link):
    out, elsewhere = tmp_path / "run", _outside(tmp_path)
    (out / "checkpoints").mkdir(parents=True)
    if link == ".saved.json.tmp":  # write_text_atomic's temporary name (host and pid are known)
        import socket

        link = f".saved.json.tmp.{socket.gethostname()}.{os.getpid()}"
    target = elsewhere if link.startswith("step_") else elsewhere / "precious.txt"
    (out / "checkpoints" / link).symlink_to(target)

    final = _save(out, 1)
    assert final.is_dir() and not final.is_symlink() and (final / "rng").is_dir()
    assert (out / "checkpoints" / "latest").read_text() == "step_1"
    assert sorted(os.listdir(elsewhere)) == ["precious.txt"]
    assert (elsewhere / "precious.txt").read_text() == "keep me\n"


def test_resume_auto_leaves_folders_it_did_not_write_and_names_them(tmp_path):
    out = tmp_path / "run"
    _save(out, 1)
    _save(out, 2)
    (out / "checkpoints" / "step_2" / "trainer_state.json").write_text("{")  # the run's own, damaged
    foreign = _user_folder(out / "checkpoints" / "step_5")  # newer, unreadable as a checkpoint
    _user_folder(out / "checkpoints" / "step_²")
    said: list[str] = []
    tc = SimpleNamespace(resume="auto", output_dir=str(out))

    assert _choose_checkpoint(tc, DistState(), said.append) == out / "checkpoints" / "step_1"
    assert (
        sorted(os.listdir(foreign)) == ["notes.txt"] and not (out / "checkpoints" / "step_5.damaged").exists()
    )
    assert (out / "checkpoints" / "step_2.damaged").is_dir()  # the run's own damaged one is set aside
    assert any(f"{foreign}: not a checkpoint this run wrote" in line for line in said)
    assert any("step_²: not a checkpoint this run wrote" in line for line in said)
    assert json.loads((out / "checkpoints" / run_checkpoints.RECORD_NAME).read_text()) == {
        "checkpoints": ["step_1"]
    }


def test_checkpoints_written_before_the_record_are_still_the_runs(tmp_path):
    """An output directory from before ``saved.json``: its ``latest`` and checkpoints are adopted."""
    out = tmp_path / "run"
    _save(out, 1)
    _save(out, 2)
    (out / "checkpoints" / run_checkpoints.RECORD_NAME).unlink()
    foreign = _user_folder(out / "checkpoints" / "step_0")
    tc = SimpleNamespace(resume="auto", output_dir=str(out))
    assert _choose_checkpoint(tc, DistState(), print) == out / "checkpoints" / "step_2"
    _save(out, 3, keep_last=2)
    assert sorted(p.name for p in (out / "checkpoints").glob("step_*")) == ["step_0", "step_2", "step_3"]
    assert (foreign / "notes.txt").is_file()


@pytest.mark.parametrize("name", ["step_²", "step_٣", "step_-1", "step_1.tmp", "step_", "../step_1"])
def test_only_ascii_step_names_are_steps(name):
    assert run_checkpoints.step_of(name) is None
    assert run_checkpoints.step_of("step_12") == 12


def test_an_unreadable_record_is_an_error_naming_it(tmp_path):
    out = tmp_path / "run"
    _save(out, 1)
    record = out / "checkpoints" / run_checkpoints.RECORD_NAME
    record.write_text("{")
    tc = SimpleNamespace(resume="auto", output_dir=str(out))
    with pytest.raises(ValueError, match=f"{record}: unreadable"):
        _choose_checkpoint(tc, DistState(), print)
    with pytest.raises(OutputError, match=f"{record}: unreadable"):
        _save(out, 2)
    assert (out / "checkpoints" / "step_1" / "trainer_state.json").is_file()
