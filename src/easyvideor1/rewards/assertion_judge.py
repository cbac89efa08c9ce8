"""Assertion tests run by a judge sandbox against the program in another sandbox (the host side).

`judge_assertions` starts two sandboxed interpreters joined by a socket: the program (`serve` role:
its top-level code, then answers about its globals) and the judge (`judge` role: runs the test
statements against proxies of those globals and writes one verdict per test on its own report
socket). Only the judge's verdicts count; why the program cannot forge one is explained in
`_sandbox_rpc.py`, and the isolation of each process in `sandbox.py`. The judge is killed first
at the time limit, so tests it had not reached read "no verdict".
"""

from __future__ import annotations

import socket
import subprocess
import time
from contextlib import ExitStack
from dataclasses import dataclass

from easyvideor1.rewards.config import SandboxConfig
from easyvideor1.rewards.sandbox import (
    Isolation,
    _clean_up,
    _drain,
    _isolation,
    _kill_everything,
    _launch,
    _Launched,
    _plan,
    _read,
    _result_lines,
)


@dataclass(frozen=True)
class AssertionVerdicts:
    """Verdicts of the judge on a program's assertion tests (see the module docstring).

    Attributes:
        passed: per test, whether the judge saw it run to the end without an exception.
        errors: per test, why it failed (an exception name, "timeout", ...), None when it passed.
        timed_out: the pair was stopped at its time limit (tests without a verdict failed).
        duration_s: wall-clock time of the pair.
        stdout, stderr: what the program printed (never read as a result).
        isolation: what the program's process got.
    """

    passed: tuple[bool, ...]
    errors: tuple[str | None, ...]
    timed_out: bool
    duration_s: float
    stdout: str
    stderr: str
    isolation: Isolation


def judge_assertions(
    source: str, tests: tuple[str, ...], config: SandboxConfig | None = None, time_limit: float | None = None
) -> AssertionVerdicts:
    """Run the program in one sandbox and `tests` (Python statements) in another, the judge.

    Each test has `config.wall_time_s` (the program's top-level code too); a test that runs out of
    it fails and stops the rest, as does the end of `time_limit` for the whole pair.
    """
    config = config or SandboxConfig()
    plan = _plan(config)
    limit = config.wall_time_s * (len(tests) + 1) + 1.0
    limit = limit if time_limit is None else min(limit, time_limit)
    output_limit = int(config.max_output_kb) << 10
    started = time.monotonic()
    with ExitStack() as stack:
        program_end, judge_end = socket.socketpair()
        stack.callback(program_end.close)
        stack.callback(judge_end.close)
        launched: list[_Launched] = []
        timed_out = False
        try:
            launched.append(
                _launch({"role": "serve", "source": source}, "", config, plan, stack, program_end)
            )
            judge_spec = {"role": "judge", "tests": list(tests), "test_time_s": config.wall_time_s}
            launched.append(_launch(judge_spec, "", config, plan, stack, judge_end))
            program_end.close()
            judge_end.close()
            try:
                launched[1].process.wait(timeout=max(0.0, limit - (time.monotonic() - started)))
            except subprocess.TimeoutExpired:
                timed_out = True
        finally:  # the judge first: its verdicts stop where the time limit found them
            for running in reversed(launched):
                _kill_everything(running.process, running.uid)
        program, judge = launched
        stdout, stderr = (_read(program.files[name], output_limit) for name in ("stdout", "stderr"))
        program_lines = _result_lines(_drain(program.report, output_limit))
        judge_lines = _result_lines(_drain(judge.report, 4 * output_limit))
    for running in launched:
        _clean_up(running, program_lines if running is program else judge_lines)
    verdicts: dict[int, list[dict]] = {}
    for line in judge_lines:
        if isinstance(line.get("i"), int) and 0 <= line["i"] < len(tests):
            verdicts.setdefault(line["i"], []).append(line)
    passed, errors = [], []
    for index in range(len(tests)):
        lines = verdicts.get(index, [])
        ok = len(lines) == 1 and lines[0].get("ok") is True
        passed.append(ok)
        reason = "no verdict" if len(lines) != 1 else str(lines[0].get("error", "failed"))
        errors.append(None if ok else reason)
    return AssertionVerdicts(
        tuple(passed),
        tuple(errors),
        timed_out,
        time.monotonic() - started,
        stdout,
        stderr,
        _isolation(program_lines),
    )
