"""A real chat-completions judge on localhost for tests that score through ``reward.judge``: it
grades the default judge prompt by comparing the model answer with the ground truth (and
VideoReasonBench's official prompt likewise), and fails with HTTP 500 every request whose model
answer contains a chosen marker or whose answer's hash falls in a ``fail_share`` of the range,
and (``pass_share``) judges another share of the answers correct whatever they say, so random
answers of a tiny model get varied rewards. It records each request's arrival time."""

from __future__ import annotations

import hashlib
import re
import threading
import time

from tests.json_server import JSONServer, chat_reply


class GradingServer(JSONServer):
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
        super().__init__(self._handle)

    def _handle(self, body: dict) -> tuple[int, dict, dict]:
        text = body["messages"][-1]["content"]
        with self.lock:
            self.arrivals.append((time.monotonic(), text))
        status, reply = self.grade(text)
        time.sleep(self.think_s)
        return status, chat_reply(reply) if status == 200 else {"error": {"message": reply}}, {}

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


def _share(answer: str) -> float:
    """Where the answer's hash falls in [0, 1]."""
    return int(hashlib.sha256(answer.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
