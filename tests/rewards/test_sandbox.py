"""The code sandbox: hostile programs are contained within their time limit, score 0, and leave the host as it was."""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import uuid
from pathlib import Path

import pytest

from easyvideor1.rewards import RewardConfig, SandboxConfig
from easyvideor1.rewards.assertion_judge import judge_assertions
from easyvideor1.rewards.sandbox import isolation_capabilities, run_python

LIMITS = SandboxConfig(wall_time_s=1.0, cpu_time_s=1, memory_mb=256, max_processes=8)
SANDBOX_UID_BASE = 1_500_000_000


def sandbox_processes() -> list[int]:
    """Live (non-zombie) processes of the sandbox uids this test process hands out.

    Only this process's uids (`sandbox._allocate_uid` derives them from its pid): other test runs
    on the same host have their own sandboxes alive at the same time.
    """
    own_uids = {
        SANDBOX_UID_BASE + (os.getpid() * 64 + slot) % (2**31 - 1 - SANDBOX_UID_BASE) for slot in range(64)
    }
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        uid = int(fields.get("Uid", "0").split()[0])
        if uid in own_uids and not fields.get("State", "").strip().startswith("Z"):
            found.append(int(entry.name))
    return found


@pytest.fixture
def listener():
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    yield server
    server.close()


@pytest.fixture
def marker(tmp_path_factory) -> str:
    return f"easyvideor1-test-{uuid.uuid4().hex}"


def hostile_programs(marker: str, port: int, secret: str) -> dict[str, str]:
    """Each prints "pwned" only if its attack worked."""
    return {
        "infinite loop": "while True:\n    pass\nprint('pwned')",
        "sleep forever": "import time\ntime.sleep(1000)\nprint('pwned')",
        "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
        "escaping fork": (
            "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(1000)\nprint('parent done')"
        ),
        "memory bomb": "blocks = []\nwhile True:\n    blocks.append(bytearray(64 << 20))\nprint('pwned')",
        "write outside": (
            f"open('/tmp/{marker}', 'w').write('x')\n"
            f"open('/dev/shm/{marker}', 'w').write('x')\n"
            f"open('{Path.cwd()}/{marker}', 'w').write('x')\nprint('pwned')"
        ),
        "read parent environment": (
            "import os\n"
            f"found = '{secret}' in repr(dict(os.environ))\n"
            f"for pid in (os.getppid(), {os.getpid()}):\n"
            "    try:\n"
            f"        found = found or '{secret}' in open(f'/proc/{{pid}}/environ').read()\n"
            "    except OSError:\n        pass\n"
            "print('pwned' if found else 'safe')"
        ),
        "network": f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1)\nprint('pwned')",
        "huge output": "import sys\nwhile True:\n    sys.stdout.write('pwned' * 10000)",
    }


PROGRAM_NAMES = list(hostile_programs("m", 1, "s"))


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_hostile_program_is_contained(name: str, listener, marker: str, monkeypatch) -> None:
    secret = f"secret-{uuid.uuid4().hex}"
    monkeypatch.setenv("EASYVIDEOR1_TEST_SECRET", secret)
    program = hostile_programs(marker, listener.getsockname()[1], secret)[name]
    started = time.monotonic()
    result = run_python(program, config=LIMITS)
    elapsed = time.monotonic() - started
    assert elapsed < LIMITS.wall_time_s + 3.0, result  # contained within its time limit
    assert "pwned" not in result.stdout or name == "huge output", result
    assert len(result.stdout) <= LIMITS.max_output_kb * 1024
    # the host is as it was
    assert sandbox_processes() == [], (
        result,
        [Path(f"/proc/{pid}/status").read_text() for pid in sandbox_processes()],
    )
    assert not Path(f"/tmp/{marker}").exists() and not Path(f"/dev/shm/{marker}").exists()
    assert not (Path.cwd() / marker).exists()
    with pytest.raises(BlockingIOError):
        listener.accept()
    assert os.environ["EASYVIDEOR1_TEST_SECRET"] == secret


@pytest.mark.parametrize("name", PROGRAM_NAMES)
def test_hostile_program_scores_zero(score, name: str, listener, marker: str) -> None:
    program = hostile_programs(marker, listener.getsockname()[1], "no-secret-in-this-environment")[name]
    truth = json.dumps({"test_cases": [{"input": "", "output": "pwned"}]})
    result = score(
        f"<answer>{program}</answer>", truth, "code", config=RewardConfig(strict=True, sandbox=LIMITS)
    )
    assert result["accuracy"] == 0.0
    assert sandbox_processes() == []


def test_isolation_measured_here() -> None:
    """As root on Linux (this machine and CI) every layer is available; elsewhere it degrades."""
    capabilities = isolation_capabilities()
    if sys.platform.startswith("linux") and os.geteuid() == 0:
        assert (
            capabilities.network and capabilities.user and capabilities.filesystem and capabilities.processes
        )
    result = run_python("print(1)", config=LIMITS)
    assert result.ok and result.stdout == "1\n"
    assert result.isolation == capabilities


def test_program_sees_an_empty_scrubbed_world() -> None:
    program = (
        "import os, sys\nprint(sorted(os.listdir('.')))\nprint(sorted(os.environ))\nprint(sys.stdin.read())"
    )
    result = run_python(program, stdin="input text", config=LIMITS)
    listing, environment, stdin = result.stdout.splitlines()[:3]
    assert listing == "[]"
    assert "EASYVIDEOR1" not in environment and "PATH" in environment
    assert stdin == "input text"


def test_configured_interpreter() -> None:
    """A configured interpreter is used; if the sandbox user cannot run it, the uid layer is dropped."""
    config = SandboxConfig(wall_time_s=5, python_executable=sys.executable)
    result = run_python("import json\nprint(json.dumps([1]))", config=config)
    assert result.ok and result.stdout == "[1]\n"
    assert result.isolation == isolation_capabilities(config)


def test_exit_codes_and_signals() -> None:
    assert run_python("import sys\nsys.exit(3)", config=LIMITS).returncode == 3
    assert run_python("raise ValueError('x')", config=LIMITS).returncode == 1
    assert "ValueError" in run_python("raise ValueError('x')", config=LIMITS).stderr
    timed_out = run_python("while True: pass", config=LIMITS)
    assert timed_out.timed_out and timed_out.returncode is None and not timed_out.ok


def test_judged_assertions_report_per_test_verdicts() -> None:
    program = "def twice(x):\n    return 2 * x\n"
    tests = ("assert twice(2) == 4", "assert twice(2) == 5", "assert twice('a') == 'aa'", "assert missing()")
    verdicts = judge_assertions(program, tests, LIMITS)
    assert verdicts.passed == (True, False, True, False)
    assert verdicts.errors == (None, "AssertionError", None, "NameError")
    assert not verdicts.timed_out and verdicts.isolation == isolation_capabilities(LIMITS)
    assert sandbox_processes() == []


def test_judge_and_program_cannot_reach_each_other() -> None:
    """Different uids and pid namespaces: the program sees no other process, the judge is not it."""
    program = (
        "import os\n"
        "UID = os.getuid()\n"
        "PIDS = sorted(int(p) for p in os.listdir('/proc') if p.isdigit())\n"
        "def uid():\n    return os.getuid()\n"
    )
    tests = ("assert UID == uid() and UID != os.getuid()", "assert PIDS == [1]")
    verdicts = judge_assertions(program, tests, LIMITS)
    capabilities = isolation_capabilities(LIMITS)
    assert verdicts.passed == (capabilities.user, capabilities.processes)


def test_a_test_that_times_out_stops_the_rest() -> None:
    program = "import time\ndef wait(s):\n    time.sleep(s)\n    return s\n"
    tests = ("assert wait(0) == 0", "assert wait(100) == 100", "assert wait(0) == 0")
    started = time.monotonic()
    verdicts = judge_assertions(program, tests, LIMITS)
    assert time.monotonic() - started < 2 * LIMITS.wall_time_s + 2.0
    assert verdicts.passed == (True, False, False)
    assert verdicts.errors[1] == "timeout" and verdicts.errors[2].startswith("not run")
    assert sandbox_processes() == []


@pytest.mark.parametrize(
    "program",
    [
        "while True:\n    pass",  # top-level code never ends
        "import os\nif os.fork() == 0:\n    os.setsid()\n    while True:\n        pass\ndef f():\n    return 1",
    ],
)
def test_judged_program_is_contained(program: str) -> None:
    started = time.monotonic()
    verdicts = judge_assertions(program, ("assert f() == 1",) * 3, LIMITS, time_limit=3.0)
    assert time.monotonic() - started < 3.0 + 2.0
    assert sandbox_processes() == []
    assert verdicts.passed in ((False,) * 3, (True,) * 3)  # the forking one may well pass: it defines f


def test_time_limit_cuts_the_pair() -> None:
    program = "import time\ndef slow():\n    time.sleep(0.6)\n    return 1\n"
    started = time.monotonic()
    verdicts = judge_assertions(program, ("assert slow() == 1",) * 10, LIMITS, time_limit=1.5)
    assert time.monotonic() - started < 1.5 + 1.5
    assert verdicts.timed_out and 0 < sum(verdicts.passed) < 10
    assert "no verdict" in verdicts.errors


HOSTILE_SERVER = """
import json, os, socket, stat
link = next(socket.socket(fileno=fd) for fd in range(3, 64) if _is_socket(fd))
link.sendall(b'{"ready": true}\\n')
replies = [
    lambda i: b'{"id": %d, "value": ' % i + b'[' * 100000 + b']' * 100000 + b'}\\n',  # too deep
    lambda i: b'{"id": %d, "value": {"zz": 1}}\\n' % i,  # unknown tag
    lambda i: b'{"id": %d, "value": {"t": [1, {"h": "x"}]}}\\n' % i,  # malformed handle
    lambda i: b'{"id": %d, "value": {"i": "not hex"}}\\n' % i,
    lambda i: b'{"id": %d, "raise": "SystemExit", "message": "bye"}\\n' % i,
    lambda i: b'{"id": %d, "value": ' % i + b'1' * (20 << 20) + b'}\\n',  # longer than a message may be
]
for i, reply in enumerate(replies, start=1):
    link.recv(1 << 16)
    link.sendall(reply(i))
link.recv(1 << 16)
"""


def test_judge_survives_a_hostile_server() -> None:
    """A program that answers the judge with malformed, deep, huge or lying messages only fails."""
    helper = "import os, stat\ndef _is_socket(fd):\n    try:\n        return stat.S_ISSOCK(os.fstat(fd).st_mode)\n    except OSError:\n        return False\n"
    started = time.monotonic()
    verdicts = judge_assertions(helper + HOSTILE_SERVER, ("assert f == 1",) * 7, LIMITS)
    assert time.monotonic() - started < 5.0
    assert verdicts.passed == (False,) * 7 and "no verdict" not in verdicts.errors, verdicts
