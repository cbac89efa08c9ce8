"""The endpoint judge client against real HTTP servers on localhost: a scripted one (its
behaviour chosen per request: fail, throttle, stall) and ``easyvideor1 serve`` on a tiny model."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from easyvideor1.errors import ConfigError
from easyvideor1.rewards.judge import MAX_ANSWER_BYTES, JudgeClient, JudgeConfig, content_key, retry_after
from tests.json_server import JSONServer, chat_reply


class Scripted(JSONServer):
    """A chat-completions server whose answer to a request depends on its user text: ``500xN``
    fails N times first, ``429`` throttles once with Retry-After: 1 (``429|VALUE``: VALUE),
    ``stall`` takes 3 s; every
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
                status, headers = 429, {"Retry-After": text.split("|")[1] if "|" in text else "1"}
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


class Trickling(JSONServer):
    """Answers "Judgement: 1", one byte every ``gap_s``: its headers too (``part="headers"``) or
    only its body; it stops when the client goes away."""

    def __init__(self, part: str, gap_s: float = 0.1):
        self.part, self.gap_s = part, gap_s
        super().__init__(lambda body: (200, chat_reply("Judgement: 1"), {}))

    def send(self, handler, data: bytes) -> None:
        head = b"".join(handler._headers_buffer) + b"\r\n"
        handler._headers_buffer = []
        fast, slow = (b"", head + data) if self.part == "headers" else (head, data)
        try:
            handler.wfile.write(fast)
            for i in range(len(slow)):
                handler.wfile.write(slow[i : i + 1])
                time.sleep(self.gap_s)
        except OSError:
            return


@pytest.mark.parametrize("part", ["headers", "body"])
def test_timeout_bounds_the_whole_attempt_however_slowly_the_bytes_come(part):
    server = Trickling(part)  # each byte comes well within timeout_s: only a total deadline ends it
    client = JudgeClient(JudgeConfig(url=server.url, timeout_s=0.5, retries=0))
    t0 = time.perf_counter()
    reply = client.ask(_ask("slow"))
    took = time.perf_counter() - t0
    client.close()
    server.close()
    assert not reply.ok and "timed out after 0.5 s" in reply.error
    assert took < 0.9  # the reply would take about 8 s


@pytest.mark.parametrize("asked", ["86400", "Wed, 01 Dec 2100 00:00:00 GMT", "inf"])
def test_retry_after_is_capped(server, asked):
    client = JudgeClient(JudgeConfig(url=server.url, retries=1, max_retry_wait_s=0.2))
    text = f"429|{asked}"
    reply = client.ask(_ask(text))
    first, second = server.requests_for(text)
    client.close()
    assert reply.ok and 0.2 <= second - first < 0.9


@pytest.mark.parametrize(
    "content,text",
    [
        ("Judgement: 1", "Judgement: 1"),
        (None, ""),
        ([{"type": "text", "text": "Judgement: "}, {"type": "text", "text": "1"}], "Judgement: 1"),
        ([{"type": "image_url", "image_url": "Judgement: 1"}], None),
        (["Judgement: 1"], None),
        ({"text": "Judgement: 1"}, None),
        (1, None),
    ],
)
def test_only_text_content_is_an_answer(content, text):
    payload = {"choices": [{"message": {"role": "assistant", "content": content}}]}
    server = JSONServer(lambda body: (200, payload, {}))
    client = JudgeClient(JudgeConfig(url=server.url, retries=0))
    reply = client.ask(_ask("x"))
    client.close()
    server.close()
    assert reply.text == text
    assert reply.ok if text is not None else "unreadable answer (content is a" in reply.error


@pytest.mark.parametrize(
    "status, attempts, error", [(200, 1, "answer longer than 1048576 bytes"), (503, 2, "HTTP 503")]
)
def test_an_answer_past_the_size_cap_is_a_failed_request(status, attempts, error):
    huge = chat_reply("Judgement: 1 " + "x" * MAX_ANSWER_BYTES)
    server = JSONServer(lambda body: (status, huge, {"Retry-After": "0"}))
    client = JudgeClient(JudgeConfig(url=server.url, retries=1))
    reply = client.ask(_ask("q"))
    client.close()
    server.close()
    # an over-size 200 is not asked again (it would come back as long); a 5xx is retried as always
    assert not reply.ok and reply.attempts == attempts and reply.error.startswith(error), reply.error
    assert len(reply.error) < 400 and client.stats.failures == 1


def test_the_cache_key_names_the_judge_and_a_foreign_entry_is_a_miss(tmp_path):
    sent: list[dict] = []
    server = JSONServer(lambda body: (sent.append(body), (200, chat_reply("Judgement: 1"), {}))[1])
    cache, port = tmp_path / "cache", server.url.split(":")[2].split("/")[0]
    base = {"url": server.url, "cache_dir": str(cache), "prompt": "Grade {prediction}"}

    def ask(**setting) -> bool:
        client = JudgeClient(JudgeConfig(**{**base, **setting}))
        reply = client.ask(_ask("q"))
        client.close()
        assert reply.ok
        return reply.cached

    assert not ask() and ask()
    (entry,) = cache.glob("*/*.json")
    other_judges = [
        {"url": f"http://localhost:{port}/v1"},  # the same server under another name: another endpoint
        {"model": "other"},
        {"prompt": "Judge {prediction}"},
        {"verdict": "yes_no"},
    ]
    assert [ask(**other) for other in other_judges] == [False] * 4 and len(sent) == 5
    stored = json.loads(entry.read_text())
    foreign_entries = [
        [1, 2],
        "text",
        None,
        {**stored, "answer": 5},
        {**stored, "request": {}},
        {"answer": "Judgement: 0"},
    ]
    for foreign in foreign_entries:
        entry.write_text(json.dumps(foreign))
        assert not ask() and json.loads(entry.read_text())["answer"] == "Judgement: 1"  # asked, rewritten
    assert ask() and len(sent) == 5 + len(foreign_entries)
    server.close()


@pytest.mark.parametrize(
    "setting,message",
    [
        ({"prompt": "Q: {question} A: {answer}"}, "reward.judge.prompt: unknown placeholder '{answer}'"),
        ({"prompt": 'Say {"ok": 1} about {prediction}'}, """unknown placeholder '{"ok": 1}'"""),
        ({"prompt": "{prediction.__class__}"}, "unknown placeholder '{prediction.__class__}'"),
        ({"prompt": "{0} {prediction}"}, "unknown placeholder '{0}'"),
        ({"prompt": "{prediction} } odd"}, "reward.judge.prompt: a single '}'"),
        ({"prompt": "{prediction:{truth}}"}, "reward.judge.prompt: a single '{'"),
        ({"prompt": "Is {truth} right?"}, "reward.judge.prompt: no {prediction} placeholder"),
        (
            {"verdict": "yes-no", "prompt": "{prediction}"},
            "reward.judge.verdict: the regular expression 'yes-no' has 0 groups",
        ),
        ({"verdict": "(a)(b)", "prompt": "{prediction}"}, "has 2 groups"),
        (
            {"verdict": "(", "prompt": "{prediction}"},
            "reward.judge.verdict: '(' is not one of default, yes_no",
        ),
        ({"verdict": "yes_no"}, "reward.judge.verdict needs a reward.judge.prompt"),
    ],
)
def test_a_bad_prompt_or_verdict_format_is_refused_at_start_up(setting, message):
    with pytest.raises(ConfigError, match="^[^\n]*$") as refused:
        JudgeConfig(url="http://x", **setting)
    assert message in str(refused.value)


def test_literal_braces_written_twice_are_text():
    prompt = 'Reply {{"same": 0 or 1}} for {prediction} (truth: {truth})'
    cfg = JudgeConfig(url="http://x", prompt=prompt, verdict=r'"same": (\d)')
    assert prompt.format(question="", truth="red", prediction="blue").startswith('Reply {"same": 0 or 1}')
    assert cfg.verdict_format.read('{"same": 1}') == 1.0


def test_helpers_and_bad_settings():
    assert retry_after("2") == 2.0 and retry_after(None) is None and retry_after("soon") is None
    assert retry_after("Wed, 21 Oct 2015 07:28:00 GMT") == 0.0  # a date in the past: now
    assert retry_after("nan") is None and retry_after("Wed, 99 Zzz 2100") is None
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
