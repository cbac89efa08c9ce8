"""Run untrusted Python (model-written code) so that it cannot affect the host.

Each execution is one fresh interpreter in its own session (process group), started with a scrubbed
environment and an empty working directory, under a wall-clock timeout and CPU, address-space,
file-size, open-file and process-count limits. On Linux it also gets, where the platform allows
(measured once per process by a probe execution, see `isolation_capabilities`):

* a new network namespace (only a down loopback: every connection fails);
* a mount namespace with fresh tmpfs over every world-writable directory (/tmp, /var/tmp, /dev/shm,
  /run/lock), so files written there vanish with the sandbox;
* a pid namespace whose pid 1 is the program, with its own /proc: host processes are invisible, and
  when the program ends the kernel kills and reaps everything it left behind (even where the host's
  init does not reap orphans, as on this project's VMs);
* as root, a fresh unprivileged uid per execution. Root ignores RLIMIT_NPROC, so without it a fork
  bomb is not contained; with it the limit holds, the program cannot write root's files or read
  files without "other" permissions, cannot read other processes' environments, and a `kill(-1)`
  issued under that uid removes any process that escaped.

Trust model of test results. Nothing the program can reach carries a pass: stdin/stdout tests pass
when the parent finds the expected output in the program's captured stdout (the expected output
never enters the sandbox); assertion tests run in a second sandbox, the judge, which never runs the
program and alone holds the socket its verdicts travel on, while the program's process only answers
the judge's requests with plain data (`assertion_judge` runs the pair; `_sandbox_rpc` explains why
that cannot forge a pass). Both
processes start with no descriptor but stdin, stdout, stderr and their socket, are not dumpable,
and (as root) run under different fresh uids in different pid namespaces, so neither can see,
signal, trace or read the other. Report channels are sockets and captured output unlinked files:
nothing in the file system names them, and /proc cannot reopen a socket. Without root the program
keeps the caller's uid; the user namespace it gets for the network (where the kernel allows
unprivileged ones) also denies it /proc access to, and tracing of, the caller's processes. Where
neither root nor user namespaces are available, the caller's processes (the trainer itself) are
exposed to it as far as the kernel lets one process of a uid trace another (Yama's ptrace scope).

Not contained: files readable by "other" users stay readable (keep datasets with expected outputs
`chmod o-rwx`); memory is limited per process (RLIMIT_AS), so a sandbox may use up to memory x
processes (no cgroup); without root only the network namespace (through a user namespace) and the
resource limits apply, and RLIMIT_NPROC then counts all processes of the calling user. Each
execution reports what it actually got in `ExecutionResult.isolation`.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from easyvideor1.rewards.config import SandboxConfig

_CHILD = str(Path(__file__).with_name("_sandbox_child.py"))
# One uid per concurrent execution: pid and a per-process counter make it unique on the host;
# the range stays below 2**31 and far above the uids of real accounts and of subuid ranges.
_UID_BASE = 1_500_000_000
_UID_SLOTS = 64
_uid_counter = itertools.count()
_uid_lock = threading.Lock()
_WORLD_WRITABLE_CANDIDATES = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/run/shm")
_PROBE_SOURCE = "import decimal, fractions, heapq, json\nprint(sum(range(10)))\n"


@dataclass(frozen=True)
class Isolation:
    """Isolation applied to (or available for) an execution.

    Attributes:
        network: ran in a new network namespace.
        filesystem: world-writable directories were private tmpfs mounts.
        user: ran under a fresh unprivileged uid (fork bombs contained, leftovers killed by uid).
        processes: ran as pid 1 of a new pid namespace with its own /proc (host processes hidden;
            every leftover process is killed and reaped when the program ends).
    """

    network: bool = False
    filesystem: bool = False
    user: bool = False
    processes: bool = False


@dataclass(frozen=True)
class ExecutionResult:
    """Outcome of one sandboxed execution.

    Attributes:
        returncode: exit status (negative: killed by that signal), None if it never finished.
        stdout, stderr: captured output (bounded by `SandboxConfig.max_output_kb`).
        timed_out: the wall-clock limit expired and the sandbox was killed.
        duration_s: wall-clock time of the execution.
        isolation: what the execution actually got.
    """

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    duration_s: float
    isolation: Isolation = Isolation()

    @property
    def ok(self) -> bool:
        """Finished in time with exit status 0."""
        return self.returncode == 0 and not self.timed_out


@dataclass(frozen=True)
class _Plan:
    python: str
    use_uid: bool
    network: bool
    private_dirs: tuple[str, ...]
    processes: bool = False


_plans: dict[str | None, _Plan] = {}
_plans_lock = threading.Lock()


def _world_writable_dirs() -> tuple[str, ...]:
    found = []
    for path in _WORLD_WRITABLE_CANDIDATES:
        try:
            info = os.stat(path)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_IWOTH and os.path.realpath(path) == path:
            found.append(path)
    return tuple(found)


def _allocate_uid() -> int:
    with _uid_lock:
        slot = next(_uid_counter) % _UID_SLOTS
    return _UID_BASE + (os.getpid() * _UID_SLOTS + slot) % (2**31 - 1 - _UID_BASE)


def _plan(config: SandboxConfig) -> _Plan:
    """Measure once per interpreter choice what isolation works on this host (cached).

    As root the preferred plan runs the program under a fresh uid; that needs an interpreter whose
    standard library the unprivileged uid can read (a Python installed under /root is not), so the
    candidates are tried in order: the configured one, or this interpreter, then the system's.
    """
    with _plans_lock:
        plan = _plans.get(config.python_executable)
    if plan is not None:
        return plan
    linux = sys.platform.startswith("linux")
    root = linux and os.geteuid() == 0
    private_dirs = _world_writable_dirs() if root else ()
    if config.python_executable:
        candidates = [config.python_executable]
    else:
        candidates = [sys.executable, shutil.which("python3"), "/usr/bin/python3"]
    chosen: _Plan | None = None
    for python in dict.fromkeys(c for c in candidates if c and os.path.exists(c)):
        for use_uid in (True, False) if root else (False,):
            trial = _Plan(python, use_uid, linux, private_dirs)
            probe = _execute(_PROBE_SOURCE, "", SandboxConfig(wall_time_s=20, cpu_time_s=20), trial, 20.0)
            if not (probe.ok and probe.stdout.strip() == "45"):
                continue
            measured = _Plan(
                python,
                probe.isolation.user,
                probe.isolation.network,
                private_dirs if probe.isolation.filesystem else (),
                probe.isolation.processes,
            )
            if chosen is None or (measured.use_uid and not chosen.use_uid):
                chosen = measured
            break
        if chosen is not None and (chosen.use_uid or not root):
            break
    plan = chosen or _Plan(candidates[0] or sys.executable, False, False, ())
    with _plans_lock:
        _plans[config.python_executable] = plan
    return plan


def isolation_capabilities(config: SandboxConfig | None = None) -> Isolation:
    """The isolation this host gives sandboxed executions (probed once, then cached)."""
    plan = _plan(config or SandboxConfig())
    return Isolation(
        network=plan.network, filesystem=bool(plan.private_dirs), user=plan.use_uid, processes=plan.processes
    )


def run_python(
    source: str, stdin: str = "", config: SandboxConfig | None = None, time_limit: float | None = None
) -> ExecutionResult:
    """Execute `source` as `__main__` with `stdin` as its input, in the sandbox.

    The wall-clock limit is `config.wall_time_s`, or `time_limit` when that is shorter (what is left
    of a response's time budget).
    """
    config = config or SandboxConfig()
    limit = config.wall_time_s if time_limit is None else min(config.wall_time_s, time_limit)
    return _execute(source, stdin, config, _plan(config), limit)


def _scrubbed_environment(home: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PYTHONHASHSEED": "0",
        # Libraries that start one thread per core would hit the process limit at import.
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


@dataclass
class _Launched:
    process: subprocess.Popen
    uid: int | None
    files: dict[str, BinaryIO]
    report: socket.socket


def _launch(
    role: dict[str, Any],
    stdin: str,
    config: SandboxConfig,
    plan: _Plan,
    stack: ExitStack,
    link: socket.socket | None = None,
) -> _Launched:
    """Start one sandbox process playing `role` (see `_sandbox_child`); the caller waits and kills."""
    uid = _allocate_uid() if plan.use_uid else None
    limits = {
        "cpu_s": max(1, int(config.cpu_time_s)),
        "memory_bytes": int(config.memory_mb) << 20,
        "file_bytes": int(config.file_size_mb) << 20,
        "processes": max(1, int(config.max_processes)),
    }
    # The host directory is root's (0700) and only holds the working directory; the captured
    # output is in unlinked files, reachable through their descriptors alone. The report channel is
    # a socket: even a process of the same uid cannot open a socket through /proc/PID/fd.
    host_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="easyvideor1-sandbox-"))
    workdir = os.path.join(host_dir, "work")
    os.mkdir(workdir, 0o700)
    files = {name: stack.enter_context(tempfile.TemporaryFile()) for name in ("spec", "stdout", "stderr")}
    report, report_child = socket.socketpair()
    stack.callback(report.close)
    stack.callback(report_child.close)
    spec = {
        **role,
        "stdin": stdin,
        "uid": uid,
        "network": plan.network,
        "private_dirs": list(plan.private_dirs),
        "tmpfs_bytes": max(1 << 20, limits["file_bytes"] * 2),
        "workdir": workdir,
        "limits": limits,
        "report_fd": report_child.fileno(),
        "link_fd": None if link is None else link.fileno(),
    }
    files["spec"].write(json.dumps(spec).encode())
    files["spec"].seek(0)
    command = [plan.python, "-I", "-B", *(() if config.allow_site_packages else ("-S",)), _CHILD]
    process = subprocess.Popen(
        command,
        stdin=files["spec"],
        stdout=files["stdout"],
        stderr=files["stderr"],
        pass_fds=(report_child.fileno(), *(() if link is None else (link.fileno(),))),
        env=_scrubbed_environment(workdir),
        cwd=workdir,
        start_new_session=True,
    )
    report_child.close()
    return _Launched(process, uid, files, report)


def _execute(source: str, stdin: str, config: SandboxConfig, plan: _Plan, limit: float) -> ExecutionResult:
    output_limit = int(config.max_output_kb) << 10
    started = time.monotonic()
    with ExitStack() as stack:
        running = _launch({"role": "program", "source": source}, stdin, config, plan, stack)
        timed_out = False
        try:
            running.process.wait(timeout=max(0.0, limit))
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            _kill_everything(running.process, running.uid)
        duration = time.monotonic() - started
        stdout, stderr = (_read(running.files[name], output_limit) for name in ("stdout", "stderr"))
        lines = _result_lines(_drain(running.report, output_limit))
    _clean_up(running, lines)
    returncode = None if timed_out else running.process.returncode
    return ExecutionResult(returncode, stdout, stderr, timed_out, duration, _isolation(lines))


def _isolation(report_lines: list[dict]) -> Isolation:
    report = next((line["isolation"] for line in report_lines if isinstance(line.get("isolation"), dict)), {})
    return Isolation(**{key: bool(report.get(key)) for key in ("network", "filesystem", "user", "processes")})


def _clean_up(running: _Launched, report_lines: list[dict]) -> None:
    if running.uid is not None and not _isolation(report_lines).filesystem:
        _remove_files_of(running.uid)


def _kill_everything(process: subprocess.Popen, uid: int | None) -> None:
    """Kill every process of the sandbox uid (escapees included), then the process group.

    The uid goes first: the bootstrap (root) then reaps the program's namespace init and exits by
    itself; killing the bootstrap first would orphan that init to the host's init.
    """
    if uid is not None:
        _kill_uid(uid)
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _kill_uid(uid: int) -> None:
    """Send SIGKILL to every process of `uid`: kill(-1) issued by a process running as that uid."""
    kill = shutil.which("kill", path="/usr/bin:/bin")
    if kill:  # an exec from C (subprocess) is safe in a multi-threaded parent
        subprocess.run(
            [kill, "-9", "-1"],
            user=uid,
            group=uid,
            extra_groups=[],
            env={},
            cwd="/",
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
        return
    child = os.fork()
    if child == 0:  # pragma: no cover - runs in the forked child
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(child, 0)


def _remove_files_of(uid: int) -> None:
    """Without private tmpfs mounts, delete what the sandbox uid left in world-writable directories."""
    for root in _world_writable_dirs():
        for directory, subdirectories, filenames in os.walk(root, topdown=False):
            for name in filenames + subdirectories:
                path = os.path.join(directory, name)
                try:
                    if os.lstat(path).st_uid != uid:
                        continue
                    if os.path.isdir(path) and not os.path.islink(path):
                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        os.unlink(path)
                except OSError:
                    continue


def _drain(channel: socket.socket, limit: int) -> str:
    """What the (killed) sandbox wrote on its report socket, without waiting for more."""
    channel.setblocking(False)
    chunks, size = [], 0
    while size < limit:
        try:
            chunk = channel.recv(min(1 << 16, limit - size))
        except (BlockingIOError, InterruptedError):
            break
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _read(handle: BinaryIO, limit: int) -> str:
    handle.seek(0)
    return handle.read(limit).decode("utf-8", errors="replace")


def _result_lines(text: str) -> list[dict]:
    lines = []
    for line in text.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            lines.append(value)
    return lines
