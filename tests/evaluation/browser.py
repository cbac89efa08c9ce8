"""A real headless browser for the report tests: Debian's ``chromium-headless-shell`` (or
``chromium``), driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: fd 3 for
commands, fd 4 for replies, NUL-separated JSON), so no driver package and no network port.

``make install`` installs the browser (apt-get); a missing browser fails the test, never skips it.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import subprocess
import tempfile
import time
from typing import Any

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")


def find_browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    raise RuntimeError(
        "no headless browser found (looked for " + ", ".join(BROWSERS) + "): `make install` installs "
        "Debian's chromium-headless-shell (apt-get install chromium-headless-shell)"
    )


class Browser:
    """One headless page: ``open(url)``, ``eval(js)``, ``insert_text``, ``screenshot``."""

    def __init__(self, width: int = 1280, height: int = 900):
        self._profile = tempfile.mkdtemp(prefix="evr1-chrome-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        # the child must see our pipe ends as its fds 3 (reads commands) and 4 (writes replies)
        def fds():  # runs in the child before exec; moved high first so neither copy clobbers the other
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_child_r, from_child_w)]
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        self.proc = subprocess.Popen(
            [
                find_browser(),
                "--headless",
                "--remote-debugging-pipe",
                "--no-sandbox",  # CI runs as root, where the sandbox refuses to start
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                f"--user-data-dir={self._profile}",
                f"--window-size={width},{height}",
                "about:blank",
            ],
            preexec_fn=fds,
            pass_fds=(3, 4),  # kept open past exec (subprocess closes the others after preexec_fn)
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Page.enable", session=True)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session=True,
        )

    def call(self, method: str, params: dict | None = None, session: bool = False, timeout: float = 60):
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buf:
                raw, self._buf = self._buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self._id:
                    if "error" in reply:
                        raise RuntimeError(f"{method}: {reply['error']}")
                    return reply.get("result", {})
            if time.monotonic() > deadline:
                raise TimeoutError(f"{method}: no reply in {timeout} s")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise RuntimeError(f"the browser exited (code {self.proc.poll()}) during {method}")
            self._buf += chunk

    def open(
        self, url: str, ready_js: str = "document.readyState === 'complete'", timeout: float = 60
    ) -> None:
        self.call("Page.navigate", {"url": url}, session=True)
        deadline = time.monotonic() + timeout
        # the old document may still answer at first: wait for the new one's condition to hold
        probe = f"(() => {{ try {{ return location.href === {json.dumps(url)} && !!({ready_js}); }} catch (e) {{ return false; }} }})()"
        while not self.eval(probe):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url}: not ready in {timeout} s")
            time.sleep(0.05)

    def eval(self, expression: str) -> Any:
        res = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"{expression}: {res['exceptionDetails']}")
        return res["result"].get("value")

    def insert_text(self, text: str) -> None:
        """Type ``text`` into the focused element (fires the input events a user's typing fires)."""
        self.call("Input.insertText", {"text": text}, session=True)

    def screenshot(self, path: str) -> None:
        data = self.call("Page.captureScreenshot", {"format": "png"}, session=True)["data"]
        with open(path, "wb") as f:
            f.write(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except Exception:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
