"""Workers die with their parent: the parent-death helper, pipe EOF, and SIGKILL of real CLI jobs.

The job tests start ``python -m easyvideor1 preprocess --workers 2`` and ``python -m easyvideor1 eval``
as real subprocesses with a unique environment marker, SIGKILL only the parent mid-run, and walk
``/proc`` for any process still carrying the marker. A process killed after its parent died stays a
zombie when the container's init does not reap orphans; a zombie holds no memory and runs nothing,
so it counts as gone.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from easyvideor1.media.workers import _Worker, die_with_parent
from tests.conftest import make_video

GRACE_S = 5.0  # "no process of the job remains 5 s later"


def _state(pid: int) -> str | None:
    """The process's state letter, or None when it no longer exists."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _alive(pid: int) -> bool:
    return _state(pid) not in (None, "Z", "X")


def _marked(marker: str) -> set[int]:
    """Live processes whose environment carries ``marker`` (children inherit it)."""
    want = marker.encode()
    found = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if want in env and _alive(int(name)):
            found.add(int(name))
    return found


def _wait_gone(pids: set[int], timeout: float) -> set[int]:
    deadline = time.monotonic() + timeout
    left = {p for p in pids if _alive(p)}
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = {p for p in left if _alive(p)}
    return left


def _job_env(marker: str) -> dict[str, str]:
    env = dict(os.environ)
    key, value = marker.split("=", 1)
    env[key] = value
    return env


def _kill_leftovers(pids: set[int]) -> None:
    for pid in pids:  # never leave a failed test's processes running
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _echo(x):
    return x


def test_idle_workers_see_eof_when_the_parent_end_closes():
    # Each forked worker used to hold its own pipe's parent end (and its elder siblings'), so a
    # dead parent never produced EOF. Closing one parent end must end exactly that worker.
    ctx = mp.get_context("fork")
    workers = [_Worker(ctx, _echo) for _ in range(2)]
    try:
        workers[0].conn.send((0, "x"))
        assert workers[0].conn.recv() == (0, True, "x")
        workers[0].close()
        workers[0].proc.join(5)
        assert workers[0].proc.exitcode == 0, "worker 0 did not see EOF on its pipe"
        assert workers[1].proc.is_alive()
        workers[1].close()
        workers[1].proc.join(5)
        assert workers[1].proc.exitcode == 0
    finally:
        for w in workers:
            if w.proc.is_alive():
                w.kill()


_HELPER_SCRIPT = """
import multiprocessing as mp, os, sys, time
from easyvideor1.media.workers import die_with_parent

def child(use_prctl):
    print(os.getpid(), die_with_parent(use_prctl=use_prctl), flush=True)
    time.sleep(120)

if __name__ == "__main__":
    p = mp.get_context(sys.argv[1]).Process(target=child, args=(sys.argv[2] == "prctl",))
    p.start()
    time.sleep(120)
"""


@pytest.mark.parametrize(
    ("mechanism", "context"), [("prctl", "fork"), ("watchdog", "fork"), ("prctl", "spawn")]
)
def test_a_child_dies_within_seconds_of_a_sigkilled_parent(tmp_path, mechanism, context):
    script = tmp_path / "helper.py"
    script.write_text(_HELPER_SCRIPT)
    parent = subprocess.Popen(
        [sys.executable, str(script), context, mechanism], stdout=subprocess.PIPE, text=True
    )
    child = 0
    try:
        pid, used = parent.stdout.readline().split()
        child = int(pid)
        assert used == mechanism  # the helper ran and reports its mechanism
        assert _alive(child)
        parent.kill()
        parent.wait()
        assert not _wait_gone({child}, GRACE_S), f"child {child} outlived its parent ({mechanism})"
    finally:
        parent.kill()
        _kill_leftovers({child} if child else set())


def _call_with_parent(pid: int) -> None:
    die_with_parent(pid)
    time.sleep(60)


def test_a_parent_gone_before_the_helper_ran_kills_the_child_at_once():
    # The race prctl alone misses: the parent died between fork and prctl (here: a wrong pid).
    p = mp.get_context("fork").Process(target=_call_with_parent, args=(os.getpid() + 10**6,))
    p.start()
    p.join(10)
    assert p.exitcode == -signal.SIGKILL


@pytest.fixture(scope="module")
def slow_videos(tmp_path_factory) -> list[str]:
    d = tmp_path_factory.mktemp("slow")
    return [make_video(d, f"v{i}", fps=30, duration=6, size=(320, 240)) for i in range(8)]


def test_sigkill_of_preprocess_leaves_no_worker_behind(tmp_path, slow_videos):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"problem": "q", "videos": [v]}) + "\n" for v in slow_videos))
    cache = tmp_path / "cache"
    marker = f"EASYVIDEOR1_TEST_JOB={uuid.uuid4().hex}"
    cmd = [sys.executable, "-m", "easyvideor1", "preprocess", "--data", str(data), "--cache-dir"]
    cmd += [str(cache), "--workers", "2", "--quiet", "--fps", "4", "--max-pixels", str(320 * 240)]
    cmd += ["--min-pixels", "4096", "--model-family", "qwen3vl"]
    proc = subprocess.Popen(cmd, env=_job_env(marker), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            seen |= _marked(marker)
            if len(seen - {proc.pid}) >= 2 and list(cache.glob("*/*.safetensors")):
                break  # both workers up and at least one video done: mid-run
            time.sleep(0.05)
        workers = _marked(marker) - {proc.pid}
        if proc.poll() is not None:
            pytest.fail(f"preprocess ended before the kill: {proc.stderr.read().decode()[-2000:]}")
        assert len(workers) == 2, "the kill must land mid-run, with 2 workers"
        proc.kill()  # the parent only: its workers must follow on their own
        proc.wait()
        left = _wait_gone(workers, GRACE_S)
        assert not left, f"workers {sorted(left)} outlived the killed preprocess"
        assert not _marked(marker), "a process of the job remains"
        assert len(list(cache.glob("*/*.safetensors"))) < len(slow_videos), "the kill landed too late"
    finally:
        proc.kill()
        _kill_leftovers(_marked(marker))


@pytest.fixture(scope="module")
def eval_assets(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("eval")
    for args in (["synth", "--out", str(d / "S"), "--n", "20"], ["make-tiny-model", "--out", str(d / "M")]):
        done = subprocess.run([sys.executable, "-m", "easyvideor1", *args], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-2000:]
    return d


def test_sigkill_of_eval_leaves_no_loader_behind(tmp_path, eval_assets):
    out = tmp_path / "out"
    marker = f"EASYVIDEOR1_TEST_JOB={uuid.uuid4().hex}"
    cmd = [sys.executable, "-m", "easyvideor1", "eval", "--model", str(eval_assets / "M")]
    cmd += ["--benchmarks", "synthetic", "--video-root", str(eval_assets / "S"), "--out", str(out)]
    cmd += ["--min-pixels", "1024", "--max-pixels", "4096", "--nframes", "4", "--batch-size", "1"]
    cmd += ["--max-new-tokens", "24", "--load-workers", "2"]
    proc = subprocess.Popen(cmd, env=_job_env(marker), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pred = out / "synthetic" / "predictions.jsonl"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if len(_marked(marker) - {proc.pid}) >= 2 and pred.exists() and pred.stat().st_size:
                break  # loaders up and generation under way
            time.sleep(0.05)
        loaders = _marked(marker) - {proc.pid}
        assert proc.poll() is None and len(loaders) >= 2, "the kill must land while the loaders run"
        proc.kill()
        proc.wait()
        left = _wait_gone(loaders, GRACE_S)
        assert not left, f"loader processes {sorted(left)} outlived the killed eval"
        assert not _marked(marker), "a process of the job remains"
    finally:
        proc.kill()
        _kill_leftovers(_marked(marker))
