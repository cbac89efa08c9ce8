"""Intra-op threads chosen on purpose (easyvideor1.threads): CPUs available (affinity, cgroup
quota), busy cores, processes starting together, and the explicit settings that win."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from easyvideor1 import threads
from easyvideor1.config import RunConfig, load_config

ROOT = Path(__file__).resolve().parents[1]
EIGHT = set(range(8))


def fake_root(tmp_path: Path, files: dict[str, str]) -> Path:
    """A directory laid out like / with only ``files`` (path relative to / -> text)."""
    for rel, text in files.items():
        p = tmp_path / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return tmp_path


def test_no_quota_means_the_affinity_set(tmp_path):
    assert threads.cgroup_cpus(tmp_path) is None
    assert threads.available_cpus(tmp_path, EIGHT) == 8
    assert threads.available_cpus(tmp_path, {3}) == 1


def test_cgroup_v2_quota_caps_the_affinity_set_rounded_down(tmp_path):
    root = fake_root(tmp_path, {"proc/self/cgroup": "0::/\n", "sys/fs/cgroup/cpu.max": "250000 100000\n"})
    assert threads.cgroup_cpus(root) == 2.5
    assert threads.available_cpus(root, EIGHT) == 2
    assert threads.available_cpus(root, {0}) == 1  # the affinity set is smaller still


def test_cgroup_v2_a_parents_quota_binds_its_children(tmp_path):
    root = fake_root(
        tmp_path,
        {
            "proc/self/cgroup": "0::/job/step\n",
            "sys/fs/cgroup/job/step/cpu.max": "max 100000\n",
            "sys/fs/cgroup/job/cpu.max": "300000 100000\n",
            "sys/fs/cgroup/cpu.max": "max 100000\n",
        },
    )
    assert threads.available_cpus(root, EIGHT) == 3


def test_cgroup_v1_quota_and_no_quota(tmp_path):
    root = fake_root(
        tmp_path,
        {"sys/fs/cgroup/cpu/cpu.cfs_quota_us": "400000\n", "sys/fs/cgroup/cpu/cpu.cfs_period_us": "100000\n"},
    )
    assert threads.available_cpus(root, EIGHT) == 4
    (root / "sys/fs/cgroup/cpu/cpu.cfs_quota_us").write_text("-1\n")
    assert threads.available_cpus(root, EIGHT) == 8
    # a quota under one CPU still leaves one thread
    (root / "sys/fs/cgroup/cpu/cpu.cfs_quota_us").write_text("50000\n")
    assert threads.available_cpus(root, EIGHT) == 1


def test_busy_cores_are_left_and_processes_share_the_rest(tmp_path):
    def choose(**kw):
        return threads.choose_threads(env={}, root=tmp_path, affinity=EIGHT, **kw).threads

    assert choose(busy=0.0) == 8
    assert choose(busy=2.6) == 5  # 3 busy cores left alone
    assert choose(busy=7.9) == 1  # never 0
    assert choose(busy=0.0, reserved=2) == 6  # our own loader processes keep their cores
    assert choose(busy=0.0, processes=2) == 4
    # ranks starting together see each other busy: up to processes - 1 busy cores are theirs
    assert choose(busy=1.0, processes=2) == 4
    assert choose(busy=3.0, processes=2) == 3
    assert choose(busy=0.0, processes=16) == 1


def test_explicit_settings_win_in_order(tmp_path):
    kw = {"root": tmp_path, "affinity": EIGHT, "busy": 0.0}
    assert threads.choose_threads(explicit=3, env={"OMP_NUM_THREADS": "5"}, **kw).threads == 3
    c = threads.choose_threads(explicit=0, env={"OMP_NUM_THREADS": "5"}, **kw)
    assert (c.threads, c.source) == (5, "OMP_NUM_THREADS")
    # torchrun exports OMP_NUM_THREADS=1 unless the variable exists: empty means "choose"
    c = threads.choose_threads(env={"OMP_NUM_THREADS": " "}, **kw)
    assert (c.threads, c.source) == (8, "available")
    assert threads.choose_threads(env={"OMP_NUM_THREADS": "2,1"}, **kw).threads == 2  # nested levels
    for bad in ("two", "0", "-1"):
        with pytest.raises(ValueError, match=f"OMP_NUM_THREADS={bad!r}: expected a whole number > 0"):
            threads.choose_threads(env={"OMP_NUM_THREADS": bad}, **kw)


def test_the_choice_says_where_it_came_from(tmp_path):
    c = threads.choose_threads(env={}, root=tmp_path, affinity={0, 1}, busy=1.2)
    assert c.describe() == "threads: 1 intra-op (2 CPUs available, 1 busy)"
    c = threads.choose_threads(env={}, root=tmp_path, affinity=EIGHT, busy=0, reserved=2, processes=2)
    assert c.describe() == "threads: 3 intra-op (8 CPUs available, 0 busy, 2 for our workers, 2 processes)"
    assert threads.choose_threads(explicit=4).describe() == "threads: 4 intra-op (from cpu.threads)"


def test_busy_cpus_sees_a_busy_process_and_not_itself():
    cpu = min(threads.affinity_cpus())
    hog = subprocess.Popen(
        [sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"]
    )
    try:
        time.sleep(0.3)
        # the hog keeps its core busy (the rest of the machine may add more, never less)
        assert threads.busy_cpus(affinity={cpu}, sample_s=0.3) >= 0.6
    finally:
        hog.kill()
        hog.wait()
    assert threads.busy_cpus(root="/nonexistent") == 0.0  # no /proc/stat: nothing known busy


def test_cpu_threads_is_a_checked_config_key():
    assert load_config(RunConfig, None, ["cpu.threads=3"]).cpu.threads == 3
    assert load_config(RunConfig, None, []).cpu.threads == 0
    with pytest.raises(ValueError, match="cpu.threads"):
        load_config(RunConfig, None, ["cpu.threads=-2"])


def run_py(code: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    full.update(PYTHONPATH=str(ROOT / "src"), **env)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=120)


def test_apply_sets_torch_and_says_so_once():
    code = (
        "import torch; from easyvideor1 import threads\n"
        "threads.apply(explicit=3); threads.apply(explicit=3)\n"
        "print(torch.get_num_threads(), torch.get_num_interop_threads())"
    )
    r = run_py(code)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["3", "3"]
    assert r.stderr.count("threads: 3 intra-op (from cpu.threads)") == 1


def test_cli_rejects_a_bad_omp_num_threads_in_one_line(tmp_path):
    """A user error: one line naming the variable, exit 2 (the trainer chooses at start-up)."""
    r = subprocess.run(
        [sys.executable, "-m", "easyvideor1", "train", "model.path=" + str(tmp_path), "data.train_files=[x]"],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "lots"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        "easyvideor1 train: OMP_NUM_THREADS='lots': expected a whole number > 0"
    ]


def test_trainer_applies_cpu_threads(tmp_path):
    import torch

    from easyvideor1.data.synthetic import write_demo_set
    from easyvideor1.demo import demo_config_path
    from easyvideor1.models.tiny import make_tiny_model
    from easyvideor1.trainer.loop import Trainer

    train, _ = write_demo_set(str(tmp_path / "data"), n_train=8, n_val=2)
    model = make_tiny_model(str(tmp_path / "model"))
    overrides = [f"data.train_files=[{train}]", "data.val_files=[]", f"model.path={model}"]
    overrides += [
        f"trainer.output_dir={tmp_path / 'run'}",
        "trainer.loggers=[]",
        "data.cache_mode=decode_only",
    ]
    before = torch.get_num_threads()
    try:
        Trainer(load_config(RunConfig, demo_config_path(), [*overrides, "cpu.threads=2"]))
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_torchruns_default_of_one_thread_is_not_taken_as_a_choice(tmp_path):
    """torchrun exports OMP_NUM_THREADS=1 to every rank of a multi-rank node: the ranks share the
    node's cores instead (here 8 cores, 4 ranks: 2 each); a user's other value, a single rank, or a
    process outside torchrun keep it."""
    kw = {"root": tmp_path, "affinity": EIGHT, "busy": 0.0, "processes": 4}
    rank = {"OMP_NUM_THREADS": "1", "TORCHELASTIC_RUN_ID": "job", "LOCAL_WORLD_SIZE": "4"}
    assert threads.torchrun_default(rank)
    c = threads.choose_threads(env=rank, **kw)
    assert (c.threads, c.source) == (2, "available")
    for env in (
        {**rank, "OMP_NUM_THREADS": "3"},
        {**rank, "LOCAL_WORLD_SIZE": "1"},
        {"OMP_NUM_THREADS": "1", "LOCAL_WORLD_SIZE": "4"},
    ):
        c = threads.choose_threads(env=env, **kw)
        assert c.source == "OMP_NUM_THREADS" and c.threads == int(env["OMP_NUM_THREADS"])
    assert threads.choose_threads(explicit=1, env=rank, **kw).threads == 1  # one thread on purpose
