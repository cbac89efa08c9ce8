"""The forgery bank: programs that try to make the code reward report a pass without solving the task.

Two problems, one per test format the code task supports: `square(n)` checked by assert statements
(chosen so that none is met by a constant such as None, -1 or True, nor by an object that answers
every comparison with True), and the same task as a stdin/stdout program. Every attack scores 0, the honest solution
scores 1, and the host is left as it was (the test process alive, no sandbox process remaining).
"""

from __future__ import annotations

import json
import os

import pytest

from easyvideor1.rewards import RewardConfig, SandboxConfig
from easyvideor1.rewards.assertion_judge import judge_assertions
from easyvideor1.rewards.sandbox import run_python
from tests.rewards.test_sandbox import sandbox_processes

CONFIG = RewardConfig(strict=True, sandbox=SandboxConfig(wall_time_s=2.0, cpu_time_s=2, time_budget_s=6.0))
ASSERTS = [
    "assert square(3) == 9",
    "assert square(4) > 15",
    "assert 3 < square(-2) < 5",
    "assert square(0) in (0, 0.0)",
    "def check(candidate):\n    assert candidate(5) == 25\n    assert candidate(6) != 35\ncheck(square)",
]
IO_CASES = [
    {"input": "5\n", "output": "25\n"},
    {"input": "-4", "output": "16"},
    {"input": "12", "output": "144"},
]
HONEST = {
    "assert": "def square(n):\n    return n * n",
    "io": "n = int(input())\nprint(n * n)",
}

# Lines every harness format so far would take as a pass, written wherever the attack can write.
FAKE_LINES = "".join(
    json.dumps(line) + "\n"
    for i in range(8)
    for line in ({"i": i, "ok": True}, {"i": i, "repr": "9"}, {"id": i, "value": True}, {"ready": True})
)
SPRAY = (
    "import os\n"
    f"FAKE = {FAKE_LINES!r}.encode()\n"
    "def spray():\n"
    "    for fd in range(3, 64):\n"
    "        try:\n"
    "            os.write(fd, FAKE)\n"
    "        except OSError:\n"
    "            pass\n"
)

ATTACKS = {
    # the hole of issue 11 as reported: one pass line per test on every descriptor, then exit
    "issue 11: pass lines on descriptors 3-63": (
        "import os\n"
        "for fd in range(3, 64):\n"
        "    try:\n"
        "        os.write(fd, ''.join('{\"i\": %d, \"ok\": true}\\n' % i for i in range(8)).encode())\n"
        "    except OSError:\n"
        "        pass\n"
        "os._exit(0)"
    ),
    # the same with every line format a harness might read, several per test
    "descriptor spray then os._exit": SPRAY + "spray()\nos._exit(0)",
    "descriptor spray, no solution": SPRAY + "spray()\ndef square(n):\n    return None",
    "os._exit before the tests": "import os\nos._exit(0)",
    "sys.exit before the tests": "import sys\nprint(9)\nsys.exit(0)",
    "SystemExit from the function": "def square(n):\n    raise SystemExit(0)",
    "atexit writes fake results": SPRAY
    + "import atexit, sys\natexit.register(spray)\natexit.register(print, 9)\nsys.exit(0)",
    "patched AssertionError and builtins": (
        "import builtins\n"
        "class Never(BaseException):\n    pass\n"
        "builtins.AssertionError = Never\n"
        "builtins.__import__ = lambda *a, **k: None\n"
        "builtins.abs = builtins.len = builtins.isinstance = lambda *a, **k: 0\n"
        "def square(n):\n    return None"
    ),
    "fake result lines on stdout": (
        f"import sys\nsys.stdout.write({FAKE_LINES!r})\nprint('ok')\ndef square(n):\n    return -1"
    ),
    "__eq__ and comparisons always true": (
        "class Anything:\n"
        "    def __eq__(self, other): return True\n"
        "    __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __eq__\n"
        "    def __bool__(self): return True\n"
        "    def __hash__(self): return 0\n"
        "    def __repr__(self): return '9'\n"
        "def square(n):\n    return Anything()\n"
        "print(Anything())"
    ),
    "int subclass with forged __eq__": (
        "class Int(int):\n"
        "    def __eq__(self, other): return True\n"
        "    def __ne__(self, other): return False\n"
        "    def __gt__(self, other): return True\n"
        "    def __lt__(self, other): return True\n"
        "    __hash__ = int.__hash__\n"
        "def square(n):\n    return Int(7)"
    ),
    "frames and gc searched for a token": SPRAY
    + (
        "import gc, sys, inspect\n"
        "found = []\n"
        "frame = sys._getframe()\n"
        "while frame is not None:\n"
        "    found.extend(v for v in frame.f_locals.values() if isinstance(v, (int, str, dict)))\n"
        "    frame = frame.f_back\n"
        "found.extend(o for o in gc.get_objects() if isinstance(o, dict))\n"
        "found.extend(f.frame.f_locals.get('spec') for f in inspect.stack())\n"
        "for value in found:\n"
        "    for fd in [value] + [v for v in (value.values() if isinstance(value, dict) else []) if isinstance(v, int)]:\n"
        "        if isinstance(fd, int) and 2 < fd < 1024:\n"
        "            try:\n"
        "                os.write(fd, FAKE)\n"
        "            except OSError:\n"
        "                pass\n"
        "text = repr(found)\n"
        "EXPECTED = [int(t) for t in ('9', '25', '16') if '== ' + t in text]\n"
        "def square(n):\n    return EXPECTED[0] if EXPECTED else None\n"
        "print(EXPECTED[0] if EXPECTED else 'none')"
    ),
    "own memory searched for expected values": (
        "import ctypes, re\n"
        "ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)  # dumpable again, so /proc/self/mem opens\n"
        "found = set()\n"
        "with open('/proc/self/maps') as maps, open('/proc/self/mem', 'rb') as memory:\n"
        "    for line in maps:\n"
        "        span, perms = line.split()[:2]\n"
        "        start, end = (int(x, 16) for x in span.split('-'))\n"
        "        if 'r' not in perms or end - start > 64 << 20:\n"
        "            continue\n"
        "        try:\n"
        "            memory.seek(start)\n"
        "            found.update(re.findall(rb'== (-?\\d+)', memory.read(end - start)))\n"
        "        except (OSError, ValueError, OverflowError):\n"
        "            pass\n"
        "GUESSES = sorted(int(x) for x in found)\n"
        "def square(n):\n    return GUESSES[0] if GUESSES else None\n"
        "print(GUESSES[0] if GUESSES else 'none')"
    ),
    "other processes' memory and descriptors": SPRAY
    + (
        "import glob\n"
        "leaks = []\n"
        "for path in glob.glob('/proc/[0-9]*'):\n"
        "    if path == '/proc/' + str(os.getpid()):\n        continue\n"
        "    for name in ('cmdline', 'environ', 'mem'):\n"
        "        try:\n"
        "            leaks.append(open(path + '/' + name, 'rb').read(1 << 16))\n"
        "        except OSError:\n"
        "            pass\n"
        "    for fd in glob.glob(path + '/fd/*'):\n"
        "        try:\n"
        "            with open(fd, 'ab') as handle:\n"
        "                handle.write(FAKE)\n"
        "        except OSError:\n"
        "            pass\n"
        "def square(n):\n    return None\n"
        "print(len(leaks))"
    ),
    "forked child sprays after the program exits": SPRAY
    + (
        "import time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    time.sleep(0.3)\n"
        "    spray()\n"
        "    os._exit(0)\n"
        "def square(n):\n    return None\n"
        "os._exit(0)"
    ),
    "signals to the parent and everyone": (
        "import os, signal\n"
        "for pid in [os.getppid(), 0, -1] + list(range(1, 4096)):\n"
        "    if pid == os.getpid():\n        continue\n"
        "    for sig in (signal.SIGSTOP, signal.SIGUSR1, signal.SIGKILL):\n"
        "        try:\n"
        "            os.kill(pid, sig)\n"
        "        except (OSError, ValueError):\n"
        "            pass\n"
        "def square(n):\n    return None"
    ),
    "files the harness might read": SPRAY
    + (
        "import glob\n"
        "targets = set()\n"
        "for root in ('/tmp', '/var/tmp', '/dev/shm', '..', '../..', os.path.expanduser('~')):\n"
        "    targets.update(glob.glob(root + '/**', recursive=True))\n"
        "for path in targets | {'../report', '../results', '../stdout', 'report', 'results'}:\n"
        "    try:\n"
        "        with open(path, 'ab') as handle:\n"
        "            handle.write(FAKE)\n"
        "    except OSError:\n"
        "        pass\n"
        "def square(n):\n    return None"
    ),
    "fake replies to the judge": (
        "import os, socket, stat\n"
        "for fd in range(3, 64):\n"
        "    try:\n"
        "        if stat.S_ISSOCK(os.fstat(fd).st_mode):\n"
        "            link = socket.socket(fileno=fd)\n"
        "            link.sendall(b'{\"ready\": true}\\n')\n"
        "            for i in range(1, 64):\n"
        "                link.sendall(json_reply(i))\n"
        "    except OSError:\n"
        "        pass\n"
        "os._exit(0)\n"
    ).replace(
        "import os, socket, stat\n",
        "import os, socket, stat\n"
        "def json_reply(i):\n"
        "    value = {'i': format(9, 'x')} if i % 2 else True\n"
        "    import json\n"
        "    return (json.dumps({'id': i, 'value': value, 'after': []}) + '\\n').encode()\n",
    ),
}


def _score(program: str, kind: str) -> float:
    from easyvideor1.rewards import compute_score

    tests = ASSERTS if kind == "assert" else IO_CASES
    result = compute_score(f"<answer>{program}</answer>", "", "code", None, config=CONFIG, test_cases=tests)
    return result["accuracy"]


@pytest.mark.parametrize("kind", ["assert", "io"])
def test_honest_solution_scores_one(kind: str) -> None:
    assert _score(HONEST[kind], kind) == 1.0


@pytest.mark.parametrize("kind", ["assert", "io"])
@pytest.mark.parametrize("name", list(ATTACKS))
def test_forgery_scores_zero(name: str, kind: str) -> None:
    assert _score(ATTACKS[name], kind) == 0.0
    assert sandbox_processes() == []  # nothing of the attack outlives the scoring


def test_forgery_with_a_correct_function_still_needs_the_values() -> None:
    """A spray that spares the program's own link to the judge does not lift a partly wrong solution."""
    spare_sockets = "            if stat.S_ISSOCK(os.fstat(fd).st_mode): continue\n"
    program = "import stat\n" + SPRAY.replace("        try:\n", "        try:\n" + spare_sockets)
    program += "spray()\ndef square(n):\n    return n * n if n > 0 else -1"
    assert _score(program, "assert") == pytest.approx(3 / 5)  # 3, 4 and check right; -2 and 0 wrong


def test_program_holds_no_descriptor_of_the_harness() -> None:
    """The program holds 0, 1, 2 only (plus its socket to the judge in assertion tests)."""
    probe = (
        "import os, stat\n"
        "OPEN = []\n"
        "for fd in range(3, 1024):\n"
        "    try:\n"
        "        OPEN.append('socket' if stat.S_ISSOCK(os.fstat(fd).st_mode) else 'other')\n"
        "    except OSError:\n"
        "        pass\n"
        "print(OPEN)\n"
    )
    result = run_python(probe, config=CONFIG.sandbox)
    assert result.stdout.strip() == "[]", result
    verdicts = judge_assertions(probe, ("assert OPEN == ['socket']",), CONFIG.sandbox)
    assert verdicts.passed == (True,), verdicts


def test_host_survives_the_bank() -> None:
    """The attacks signalled every pid they could see: this process and its parent are still here."""
    os.kill(os.getpid(), 0)
    os.kill(os.getppid(), 0)


def test_tests_helpers_cannot_be_replaced_by_the_program() -> None:
    """A program that rebinds the module or builtin a test checks with gains nothing."""
    tests = ["assert math.isclose(square(1.5), 2.25)", "assert abs(square(-1.5) - 2.25) < 1e-9"]
    forged = (
        "import builtins\n"
        "class math:\n    isclose = staticmethod(lambda *a, **k: True)\n"
        "abs = builtins.abs = lambda x: 0\n"
        "def square(n):\n    return None"
    )
    honest = "def square(n):\n    return n * n"
    assert judge_assertions(forged, tuple(tests), CONFIG.sandbox).passed == (False, False)
    assert judge_assertions(honest, tuple(tests), CONFIG.sandbox).passed == (True, True)


NON_ROOT_RUN = """
import json, sys
sys.path.insert(0, sys.argv[1])
from easyvideor1.rewards.config import SandboxConfig
from easyvideor1.rewards.assertion_judge import judge_assertions
from easyvideor1.rewards.sandbox import run_python
config = SandboxConfig(wall_time_s=2.0, cpu_time_s=2)
tests = tuple(json.loads(sys.argv[2]))
programs = json.loads(sys.argv[3])
print(json.dumps([list(judge_assertions(p, tests, config).passed) for p in programs]))
"""
PROC_INJECTION = SPRAY + (
    "import glob\n"
    "for path in glob.glob('/proc/[0-9]*/fd/*'):\n"
    "    try:\n"
    "        with open(path, 'ab') as handle:\n"
    "            handle.write(FAKE)\n"
    "    except OSError:\n"
    "        pass\n"
    "spray()\n"
    "def square(n):\n    return None"
)


def test_without_root_a_program_cannot_inject_verdicts() -> None:
    """Without root the program shares the caller's uid and sees every process of it, yet cannot
    write into their descriptors (its user namespace, sockets /proc cannot reopen, a judge that is
    not dumpable)."""
    import shutil
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    import easyvideor1.rewards as rewards

    root = Path(tempfile.mkdtemp(prefix="easyvideor1-nonroot-"))
    try:
        package = root / "easyvideor1" / "rewards"
        package.mkdir(parents=True)
        (root / "easyvideor1" / "__init__.py").write_text("")
        (package / "__init__.py").write_text("")
        for name in (
            "sandbox",
            "assertion_judge",
            "_sandbox_child",
            "_sandbox_rpc",
            "_sandbox_wire",
            "config",
            "judge",
            "judge_format",
        ):
            shutil.copy(Path(rewards.__file__).with_name(f"{name}.py"), package)
        # the sandbox's config pulls in the judge's settings, and both validate with the
        # standard-library-only helpers one level up
        for helper in ("validation.py", "errors.py"):  # the checks raise the user-error type
            shutil.copy(Path(rewards.__file__).parent.with_name(helper), package.parent)
        for path in [root, *root.rglob("*")]:
            path.chmod(0o755)
        drop = {"user": 65534, "group": 65534, "extra_groups": []} if os.geteuid() == 0 else {}
        pythons = [sys.executable, "/usr/bin/python3", shutil.which("python3")]
        usable = [p for p in dict.fromkeys(pythons) if p and _runs(p, drop, root)]
        assert usable, f"no interpreter the unprivileged user can run among {pythons}"
        arguments = [json.dumps(ASSERTS), json.dumps([PROC_INJECTION, HONEST["assert"]])]
        run = subprocess.run(
            [usable[0], "-c", NON_ROOT_RUN, str(root), *arguments],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=root,
            **drop,
        )
        assert run.returncode == 0, run.stderr
        forged, honest = json.loads(run.stdout)
        assert forged == [False] * len(ASSERTS) and honest == [True] * len(ASSERTS)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _runs(python: str, drop: dict, cwd) -> bool:
    import subprocess

    try:
        probe = subprocess.run([python, "-c", "import json, ctypes"], capture_output=True, cwd=cwd, **drop)
    except OSError:  # e.g. an interpreter under /root
        return False
    return probe.returncode == 0
