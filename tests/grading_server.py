"""A real chat-completions judge on localhost for tests that score through ``reward.judge``: it
grades the default judge prompt by comparing the model answer with the ground truth (and
VideoReasonBench's official prompt likewise), and fails with HTTP 500 every request whose model
answer contains a chosen marker or whose answer's hash falls in a ``fail_share`` of the range,
and (``pass_share``) judges another share of the answers correct whatever they say, so random
answers of a tiny model get varied rewards. It records each request's arrival time."""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class GradingServer:
    def __init__(
        self,
        fail_marker: str | None = None,
        fail_share: float = 0.0,
        think_s: float = 0.0,
        pass_share: float = 0.0,
    ):
        self.fail_marker, self.fail_share, self.think_s = fail_marker, fail_share, think_s
        self.pass_share = pass_share
        self.lock = threading.Lock()
        self.arrivals: list[tuple[float, str]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                return

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                text = body["messages"][-1]["content"]
                with outer.lock:
                    outer.arrivals.append((time.monotonic(), text))
                status, reply = outer.grade(text)
                time.sleep(outer.think_s)
                payload = (
                    {"choices": [{"message": {"role": "assistant", "content": reply}}]}
                    if status == 200
                    else {"error": {"message": reply}}
                )
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def grade(self, text: str) -> tuple[int, str]:
        official = re.search(r"Model Response:\n(.*?)\n\nGround-Truth Answer:\n(.*?)\n\nNOTE", text, re.S)
        if official:
            answer, truth = official.group(1), official.group(2)
        else:
            answer = re.search(r"Model answer: (.*)", text).group(1)
            truth = re.search(r"Ground truth: (.*)", text).group(1)
        if self.fails(answer):
            return 500, "scripted failure"
        same = (
            answer.strip().lower() == truth.strip().lower() or 0.5 <= _share(answer) < 0.5 + self.pass_share
        )
        if official:
            return 200, "Correct" if same else "Incorrect"
        return 200, f"Compared.\nJudgement: {int(same)}"

    def fails(self, answer: str) -> bool:
        if self.fail_marker and self.fail_marker in answer:
            return True
        return _share(answer) < self.fail_share

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _share(answer: str) -> float:
    """Where the answer's hash falls in [0, 1]."""
    return int(hashlib.sha256(answer.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
