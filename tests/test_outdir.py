"""``outdir.py``: a planted symbolic link or FIFO in an output directory is refused or removed
itself, never written through; a command that replaces files of fixed names refuses a non-empty
directory no earlier run of its kind wrote, unless asked to reuse it."""

from __future__ import annotations

import os
import socket

import pytest

from easyvideor1.errors import UserError
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


def _writers():
    """Each file or folder of a fixed name a command writes under its output directory, and a call
    that writes it (name -> (planted entry, call))."""
    from easyvideor1.curation.outputs import write_json_lines, write_kept
    from easyvideor1.evaluation.predictions import PredictionWriter
    from easyvideor1.evaluation.report import write_summary
    from easyvideor1.evaluation.report_html import write_page
    from easyvideor1.evaluation.results import write_jsonl_atomic
    from easyvideor1.trainer.evaluate import append_generations
    from easyvideor1.trainer.metrics import MetricsLogger, rewrite_jsonl
    from easyvideor1.trainer.skipping import SkipLog

    return {
        "metrics.jsonl": lambda out: MetricsLogger(str(out), ["jsonl"]),
        "tensorboard": lambda out: MetricsLogger(str(out), ["tensorboard"]),
        "generations.jsonl": lambda out: append_generations(str(out), 1, [{"response": "A"}]),
        "skipped_records.jsonl": lambda out: SkipLog(str(out)).write([{"phase": "step", "step": 1}]),
        # a resume rolls a log back to its step by rewriting it
        "generations.jsonl rewritten": lambda out: rewrite_jsonl(str(out / "generations.jsonl"), bool),
        "predictions.jsonl": lambda out: PredictionWriter(str(out / "predictions.jsonl")),
        "predictions.jsonl scored": lambda out: write_jsonl_atomic(str(out / "predictions.jsonl"), []),
        "results.json": lambda out: write_summary({}, str(out)),
        "report.html": lambda out: write_page(str(out / "report.html"), "run", {}, []),
        "pass_rates.jsonl": lambda out: write_json_lines(str(out / "pass_rates.jsonl"), []),
        "kept": lambda out: write_kept([], [], str(out)),
    }


@pytest.mark.parametrize("name", list(_writers()))
def test_a_link_planted_at_a_fixed_name_is_refused_naming_it(tmp_path, outside, name):
    out = tmp_path / "out"
    out.mkdir()
    entry = name.split()[0]
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (out / entry).symlink_to(folder if "." not in entry else outside)
    if entry == "generations.jsonl":  # the log being rolled back exists (through the link)
        outside.write_text('{"step": 1}\n{"step": 2}\n')
    before = outside.read_text()
    with pytest.raises(OutputError, match=f"^{out / entry}: is a symbolic link") as e:
        _writers()[name](out)
    # a user error: the command line prints it as this one line and exits 2
    assert isinstance(e.value, UserError) and e.value.exit_code == 2 and "\n" not in str(e.value)
    assert outside.read_text() == before and os.listdir(folder) == []
    assert (out / entry).is_symlink()  # refused, not removed either


def test_a_fifo_at_an_appended_name_is_refused_not_waited_on(tmp_path):
    from easyvideor1.outdir import open_append

    os.mkfifo(tmp_path / "metrics.jsonl")
    with pytest.raises(OutputError, match="metrics.jsonl: is not a regular file"):
        open_append(tmp_path / "metrics.jsonl")
