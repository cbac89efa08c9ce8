"""``outdir.py``: a planted symbolic link or FIFO in an output directory is refused or removed
itself, never written through; a command that replaces files of fixed names refuses a non-empty
directory no earlier run of its kind wrote, unless asked to reuse it."""

from __future__ import annotations

import os
import socket

import pytest

from easyvideor1.outdir import LOCK_NAME, OutputError, Reuse, hold, write_text_atomic


@pytest.fixture
def outside(tmp_path):
    """A file outside the output directory that a planted link points at."""
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep me\n")
    return target


@pytest.mark.parametrize("planted", ["symlink", "dangling_symlink", "fifo"])
def test_a_planted_lock_is_refused_and_its_target_untouched(tmp_path, outside, planted):
    out = tmp_path / "out"
    out.mkdir()
    lock = out / LOCK_NAME
    if planted == "symlink":
        lock.symlink_to(outside)
    elif planted == "dangling_symlink":  # O_CREAT would have created the target
        lock.symlink_to(tmp_path / "created-elsewhere.txt")
    else:
        os.mkfifo(lock)
    with pytest.raises(OutputError, match=f"{lock}: is (a symbolic link|not a regular file)") as e:
        with hold(out, "--out", "eval"):
            pass
    assert e.value.exit_code == 2 and "\n" not in str(e.value)
    assert outside.read_text() == "keep me\n" and not (tmp_path / "created-elsewhere.txt").exists()


def test_an_atomic_write_does_not_follow_a_link_at_its_temporary_name(tmp_path, outside):
    path = tmp_path / "results.md"
    (tmp_path / f".results.md.tmp.{socket.gethostname()}.{os.getpid()}").symlink_to(outside)
    write_text_atomic(path, "table\n")
    assert path.read_text() == "table\n" and not path.is_symlink()
    assert outside.read_text() == "keep me\n"


def test_reuse_refuses_a_foreign_folder_unless_asked(tmp_path):
    eval_kind = Reuse(("eval", "score"), "--reuse-out")
    foreign = tmp_path / "site"
    foreign.mkdir()
    (foreign / "report.html").write_text("<p>mine</p>")
    with pytest.raises(OutputError, match=f"--out {foreign}: not empty .* give --reuse-out"):
        with hold(foreign, "--out", "eval", eval_kind):
            pass
    assert os.listdir(foreign) == ["report.html"]  # not even a lock file left behind
    with hold(foreign, "--out", "eval", Reuse(("eval", "score"), "--reuse-out", asked=True)):
        pass
    # an earlier run of the kind left its .lock naming it: its folder is its own
    earlier = tmp_path / "earlier"
    with hold(earlier, "--out", "score", eval_kind):
        (earlier / "results.json").write_text("{}")
    with hold(earlier, "--out", "eval", eval_kind):
        pass
    # another command's folder is not
    with hold(tmp_path / "trained", "--out", "train"):
        (tmp_path / "trained" / "metrics.jsonl").write_text("")
    with pytest.raises(OutputError, match="not the output of an earlier eval run"):
        with hold(tmp_path / "trained", "--out", "eval", eval_kind):
            pass
