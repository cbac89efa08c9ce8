"""Hard time limits for trusted-but-slow calls (symbolic math) that work from any thread.

`signal.alarm` (math-verify's own timeout) only works in the main thread and cannot interrupt C code
(a huge integer power inside sympy). `IsolatedCaller` instead runs the call in a persistent helper
process and kills that process when the call overruns; the next call starts a fresh one. A call costs
one pipe round trip (~0.1 ms) on top of the work; a restart costs one interpreter start.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

_HELPER_MAIN = (
    "import sys\n"
    "from multiprocessing.connection import Connection\n"
    "from easyvideor1.rewards.isolation import _serve\n"
    "_serve(Connection(int(sys.argv[1])))\n"
)


class CallTimeout(TimeoutError):
    """The call did not finish within its time limit; its helper process was killed."""


def _serve(connection: Connection) -> None:
    while True:
        try:
            function, args = connection.recv()
        except (EOFError, OSError):
            return
        try:
            reply = ("ok", function(*args))
        except Exception as error:  # the caller re-raises it in its own process
            reply = ("error", error)
        try:
            connection.send(reply)
        except Exception as error:  # an unpicklable result or exception
            connection.send(("error", RuntimeError(f"{type(error).__name__}: {error}")))


class IsolatedCaller:
    """Runs picklable calls one at a time in a helper process, with a hard timeout per call.

    Thread-safe: calls from several threads are serialised. The helper is a fresh interpreter
    (`python -c ...`): safe in multi-threaded parents (a trainer with
    torch threads), and unlike multiprocessing's spawn it never re-imports the caller's main script.
    Functions and arguments must be picklable by reference (module-level functions).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._connection: Connection | None = None

    def call(self, function: Callable[..., Any], args: tuple[Any, ...], timeout: float) -> Any:
        """`function(*args)` in the helper; raises `CallTimeout` after `timeout` seconds."""
        with self._lock:
            connection = self._ensure_started()
            connection.send((function, args))
            if not connection.poll(timeout):
                self._stop()
                raise CallTimeout(f"{getattr(function, '__name__', function)} exceeded {timeout:g} s")
            try:
                status, payload = connection.recv()
            except (EOFError, OSError) as error:
                self._stop()
                raise RuntimeError("isolated helper process died") from error
        if status == "error":
            raise payload
        return payload

    def _ensure_started(self) -> Connection:
        if self._process is not None and self._process.poll() is None and self._connection is not None:
            return self._connection
        self._stop()
        parent_end, child_end = socket.socketpair()
        environment = {**os.environ, "PYTHONPATH": os.pathsep.join(path for path in sys.path if path)}
        self._process = subprocess.Popen(
            [sys.executable, "-c", _HELPER_MAIN, str(child_end.fileno())],
            pass_fds=(child_end.fileno(),),
            stdin=subprocess.DEVNULL,
            env=environment,
        )
        child_end.close()
        self._connection = Connection(parent_end.detach())
        return self._connection

    def _stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
        if self._connection is not None:
            self._connection.close()
        self._process, self._connection = None, None

    def close(self) -> None:
        """Stop the helper process (it also ends with its parent)."""
        with self._lock:
            self._stop()
