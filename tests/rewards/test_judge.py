"""The endpoint judge client against real HTTP servers on localhost: a scripted one (its
behaviour chosen per request: fail, throttle, stall) and ``easyvideor1 serve`` on a tiny model."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from easyvideor1.rewards.judge import JudgeClient, JudgeConfig, content_key, retry_after
from tests.json_server import JSONServer, chat_reply


class Scripted(JSONServer):
    """A chat-completions server whose answer to a request depends on its user text: ``500xN``
    fails N times first, ``429`` throttles once with Retry-After: 1, ``stall`` takes 3 s; every
    answer is "Judgement: 1" after a 0.3 s think. It records arrivals and the most requests it
    held open at once."""

    def __init__(self):
        self.lock = threading.Lock()
        self.open = self.most_open = 0
        self.arrivals: list[tuple[str, float]] = []
        self.failed: dict[str, int] = {}
        super().__init__(self._handle)

    def _handle(self, body: dict) -> tuple[int, dict, dict]:
        text = body["messages"][-1]["content"]
        with self.lock:
            self.arrivals.append((text, time.monotonic()))
            self.open += 1
            self.most_open = max(self.most_open, self.open)
            done = self.failed.get(text, 0)
        try:
            status, headers = 200, {}
            if text.startswith("500x") and done < int(text.split("x")[1].split()[0]):
                status = 500
            elif text.startswith("429") and done < 1:
                status, headers = 429, {"Retry-After": "1"}
            if status != 200:
                with self.lock:
                    self.failed[text] = done + 1
                return status, {"error": {"message": "scripted"}}, headers
            time.sleep(3.0 if text.startswith("stall") else 0.3)
            return 200, chat_reply("Judgement: 1"), {}
        finally:
            with self.lock:
                self.open -= 1

    def requests_for(self, text: str) -> list[float]:
        return [t for x, t in self.arrivals if x == text]


@pytest.fixture
def server():
    s = Scripted()
    yield s
    s.close()


def _ask(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_requests_run_concurrently_and_a_rerun_comes_from_the_cache(server, tmp_path):
    cfg = JudgeConfig(url=server.url, max_concurrency=4, cache_dir=str(tmp_path / "cache"))
    client = JudgeClient(cfg)
    t0 = time.perf_counter()
    replies = [f.result() for f in [client.submit(_ask(f"q{i}")) for i in range(8)]]
    took = time.perf_counter() - t0
    client.close()
    assert all(r.ok and r.text == "Judgement: 1" for r in replies)
    assert server.most_open == 4 and took < 8 * 0.3  # 4 at a time, not one after another
    assert client.stats.metrics()["reward/judge_failures"] == 0
    before = len(server.arrivals)
    again = JudgeClient(cfg)  # a rerun: every answer from disk, nothing sent
    assert [again.ask(_ask(f"q{i}")).text for i in range(8)] == ["Judgement: 1"] * 8
    assert len(server.arrivals) == before and again.stats.cache_hits == 8 and again.stats.requests == 0
    again.close()


def test_identical_requests_in_flight_are_sent_once(server):
    client = JudgeClient(JudgeConfig(url=server.url, max_concurrency=4))
    futures = [client.submit(_ask("same")) for _ in range(5)]
    assert all(f.result().ok for f in futures)
    assert len(server.requests_for("same")) == 1
    client.close()


def test_5xx_is_retried_429_waits_for_retry_after_and_what_still_fails_is_not_a_score(server):
    client = JudgeClient(JudgeConfig(url=server.url, retries=2, max_concurrency=2))
    ok = client.ask(_ask("500x2 then fine"))
    assert ok.ok and ok.attempts == 3 and len(server.requests_for("500x2 then fine")) == 3
    throttled = client.ask(_ask("429 once"))
    first, second = server.requests_for("429 once")
    assert throttled.ok and second - first >= 1.0  # Retry-After: 1 honoured (backoff would be 0.5 s)
    failed = client.ask(_ask("500x9 always"))
    assert not failed.ok and failed.text is None and "HTTP 500" in failed.error
    assert failed.attempts == 3 and client.stats.failures == 1
    client.close()


def test_a_timeout_is_counted_as_not_scored(server):
    client = JudgeClient(JudgeConfig(url=server.url, timeout_s=0.5, retries=0))
    reply = client.ask(_ask("stall"))
    assert not reply.ok and "timed out after 0.5 s" in reply.error
    assert client.stats.metrics()["reward/judge_failures"] == 1.0
    client.close()


def test_helpers_and_bad_settings():
    assert retry_after("2") == 2.0 and retry_after(None) is None and retry_after("soon") is None
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past: now
    a = content_key({"model": "m", "messages": _ask("x")})
    assert (
        a
        == content_key({"messages": _ask("x"), "model": "m"})
        != content_key({"model": "n", "messages": _ask("x")})
    )
    with pytest.raises(ValueError, match="reward.judge.max_concurrency must be >= 1"):
        JudgeConfig(url="http://x", max_concurrency=0)
    with pytest.raises(ValueError, match="reward.judge.url must start with http"):
        JudgeConfig(url="localhost:8000")
    with pytest.raises(ValueError, match="the environment variable NO_SUCH_KEY_VAR is not set"):
        JudgeClient(JudgeConfig(url="http://x", api_key_env="NO_SUCH_KEY_VAR"))


@pytest.mark.slow
def test_easyvideor1_serve_answers_the_client(tmp_path):
    """``easyvideor1 serve`` on a tiny model: a real server process; concurrent requests served."""
    from easyvideor1.models.tiny import make_tiny_model

    model = make_tiny_model(str(tmp_path / "model"), "qwen3vl")
    proc = subprocess.Popen(
        [sys.executable, "-m", "easyvideor1", "serve", "--model", model, "--port", "0", "--name", "tiny"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        line = ""
        for line in proc.stdout:
            if line.startswith("serving "):
                break
        assert line.startswith("serving tiny on http://"), line
        url = line.split(" on ")[1].strip()
        client = JudgeClient(JudgeConfig(url=url, model="tiny", max_tokens=8, max_concurrency=3))
        replies = [f.result() for f in [client.submit(_ask(f"grade answer {i}")) for i in range(3)]]
        assert all(r.ok and isinstance(r.text, str) for r in replies), replies
        client.close()
        import httpx

        bad = httpx.post(f"{url}/chat/completions", json={"messages": "nope"}, timeout=30)
        assert (
            bad.status_code == 400 and "messages must be a non-empty list" in bad.json()["error"]["message"]
        )
        assert httpx.get(f"{url}/models", timeout=30).json()["data"][0]["id"] == "tiny"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
