"""``easyvideor1 serve``'s HTTP server on a tiny model, over real connections on localhost: the
4xx answers to malformed requests, ``n`` choices, streaming, cancellation when a client goes away,
the read timeout and the API key."""

import http.client
import json
import socket
import time

import httpx
import pytest

from easyvideor1.cli import main
from easyvideor1.rollout.server import ChatServer, exposure_warning, load_server

ASK = [{"role": "user", "content": "grade this"}]


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """An open server and a guarded one (API key, 0.3 s read timeout) over one tiny model's engine."""
    from easyvideor1.models.tiny import make_tiny_model

    model = make_tiny_model(str(tmp_path_factory.mktemp("serve") / "model"), "qwen3vl")
    open_server = load_server(model, "tiny", port=0)
    guarded = ChatServer(
        open_server.engine, open_server.processor, "tiny", port=0, api_key="sekrit", read_timeout_s=0.3
    )
    for s in (open_server, guarded):
        s.start()
    yield open_server, guarded
    guarded.httpd.shutdown()
    guarded.httpd.server_close()
    open_server.close()


@pytest.fixture
def server(servers):
    return servers[0]


def _raw(server, request: bytes) -> tuple[int, dict, bool]:
    """Send raw bytes; the status, the JSON answer and whether the server said it closes the
    connection (and did)."""
    host, port = server.httpd.server_address[:2]
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(request)
        answer = http.client.HTTPResponse(sock)
        answer.begin()
        payload = json.loads(answer.read())
        closed = answer.getheader("Connection") == "close"
        if closed:
            sock.settimeout(2)
            assert sock.recv(1) == b""
    return answer.status, payload, closed


def _post(body: bytes, *headers: str, framed: bool = True) -> bytes:
    """A raw POST; its Content-Length is added unless ``headers`` frame the body or ``framed`` is False."""
    if framed and not any(h.startswith(("Content-Length", "Transfer-Encoding")) for h in headers):
        headers = (*headers, f"Content-Length: {len(body)}")
    head = "".join(f"{h}\r\n" for h in headers)
    return f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode() + body


def _json(**fields) -> bytes:
    return json.dumps({"messages": ASK, **fields}).encode()


@pytest.mark.parametrize(
    "request_bytes, param, message",
    [
        (_post(b"{}", "Content-Length: two"), None, "Content-Length must be one whole number"),
        (_post(b"{}", "Content-Length: 2", "Content-Length: 3"), None, "Content-Length must be one whole"),
        (
            _post(b'{"messages": [], "max_tokens": Infinity}'),
            None,
            "Infinity is not a JSON number",
        ),
        (_post(b'{"temperature": NaN}'), None, "NaN is not a JSON number"),
        (
            _post(_json(temperature=1e999).replace(b"Infinity", b"1e999")),
            "temperature",
            "temperature must be a finite number",
        ),
        (_post(_json(max_tokens=0)), "max_tokens", "max_tokens must be a whole number >= 1"),
        (_post(_json(n=1000)), "n", "n must be a whole number between 1 and 16"),
        (_post(_json(top_p=0)), "top_p", "top_p must be a finite number > 0"),
        (_post(_json(stream="yes")), "stream", "stream must be true or false"),
        (_post(_json(stop=["\n"])), "stop", "stop is not supported"),
        (_post(_json(max_tokens=5000)), "max_tokens", "more than the model's context"),
        (_post(b'{"messages": "nope"}'), "messages", "messages must be a non-empty list"),
        (_post(b"{", "Transfer-Encoding: gzip"), None, "Transfer-Encoding 'gzip' is not supported"),
        (_post(b"zz\r\n{}\r\n0\r\n\r\n", "Transfer-Encoding: chunked"), None, "a malformed chunk size line"),
        (b"BREW /v1/chat/completions HTTP/1.1\r\nHost: x\r\n\r\n", None, "method 'BREW' is not allowed"),
    ],
)
def test_a_malformed_request_is_answered_4xx_in_openai_error_shape(server, request_bytes, param, message):
    status, payload, _ = _raw(server, request_bytes)
    error = payload["error"]
    assert 400 <= status < 500 and message in error["message"], (status, error)
    assert error["type"] == "invalid_request_error" and error["param"] == param and "code" in error


@pytest.mark.parametrize(
    "model, status, code, message",
    [
        ("gpt-4o", 404, "model_not_found", "The model `gpt-4o` does not exist; this server serves `tiny`"),
        (7, 400, None, "model must be a string, got 7"),
        ("tiny", 200, None, None),
        (None, 200, None, None),  # no name: the served model (vLLM reads it so too)
    ],
)
def test_a_request_for_another_model_is_answered_404_model_not_found(server, model, status, code, message):
    answered, payload, _ = _raw(server, _post(_json(model=model, max_tokens=1)))
    assert answered == status, payload
    if status == 200:
        assert payload["model"] == "tiny"
    else:
        assert payload["error"] == {
            "message": message,
            "type": "invalid_request_error",
            "param": "model",
            "code": code,
        }


def test_a_request_with_a_body_of_unknown_length_is_refused_and_the_connection_closed(server):
    status, payload, closed = _raw(server, _post(b'{"messages": []}', framed=False))
    assert status == 411 and "needs a Content-Length" in payload["error"]["message"] and closed


def test_a_chunked_body_is_read_as_one_request_and_the_connection_serves_the_next(server):
    host, port = server.httpd.server_address[:2]
    conn = http.client.HTTPConnection(host, port, timeout=30)
    body = _json(max_tokens=2, temperature=0)
    conn.request("POST", "/v1/chat/completions", body=iter([body[:10], body[10:]]), encode_chunked=True)
    first = conn.getresponse()
    assert first.status == 200 and json.loads(first.read())["choices"][0]["finish_reason"] in (
        "stop",
        "length",
    )
    conn.request("GET", "/v1/models")  # the same connection: nothing of the body was left over
    second = conn.getresponse()
    assert second.status == 200 and json.loads(second.read())["data"][0]["id"] == "tiny"
    conn.close()


def test_n_choices_are_answered_and_a_stream_is_the_same_text_as_server_sent_events(server):
    answer = httpx.post(
        f"{server.url}/chat/completions", json={"messages": ASK, "max_tokens": 4, "n": 3}, timeout=30
    )
    choices = answer.json()["choices"]
    assert answer.status_code == 200 and [c["index"] for c in choices] == [0, 1, 2]
    assert answer.json()["usage"]["completion_tokens"] <= 12

    greedy = {"messages": ASK, "max_tokens": 6, "temperature": 0}
    whole = httpx.post(f"{server.url}/chat/completions", json=greedy, timeout=30).json()["choices"][0]
    events = []
    stream = {**greedy, "stream": True, "stream_options": {"include_usage": True}}
    with httpx.stream("POST", f"{server.url}/chat/completions", json=stream, timeout=30) as r:
        assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
        events = [line.removeprefix("data: ") for line in r.iter_lines() if line]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"} and len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == whole["message"]["content"]
    assert chunks[-2]["choices"][0]["finish_reason"] == whole["finish_reason"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] >= 1


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_goes_away_cancels_its_generation(server, stream):
    """A greedy request for the model's whole context (the tiny model never ends it early: 14 s on
    its own) is dropped by its client; a 1-token request right after is answered at once, not
    after the abandoned one."""
    host, port = server.httpd.server_address[:2]
    long = _json(max_tokens=4000, temperature=0, stream=stream)
    with socket.create_connection((host, port)) as sock:
        sock.sendall(_post(long))
        time.sleep(0.3)  # generating by now
    start = time.monotonic()
    short = httpx.post(f"{server.url}/chat/completions", json={"messages": ASK, "max_tokens": 1}, timeout=30)
    assert short.status_code == 200 and time.monotonic() - start < 5  # not cancelled: 14 s


def test_the_api_key_is_required_and_a_silent_connection_times_out(servers):
    _, guarded = servers
    url = f"{guarded.url}/chat/completions"
    body = {"messages": ASK, "max_tokens": 1}
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        refused = httpx.post(url, json=body, headers=headers, timeout=30)
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
    assert httpx.get(f"{guarded.url}/models", timeout=30).status_code == 401
    assert (
        httpx.post(url, json=body, headers={"Authorization": "Bearer sekrit"}, timeout=30).status_code == 200
    )

    start = time.monotonic()  # headers promise 100 bytes; 10 come, then nothing
    status, payload, closed = _raw(
        guarded, _post(b'{"message', "Content-Length: 100", "Authorization: Bearer sekrit")
    )
    assert status == 408 and closed and time.monotonic() - start < 2, payload


def test_serving_beyond_loopback_without_a_key_warns(tmp_path, capsys):
    assert exposure_warning("127.0.0.1", None) is None and exposure_warning("localhost", None) is None
    assert exposure_warning("0.0.0.0", "k") is None and exposure_warning("::1", None) is None
    # the CLI warns before it loads anything (here a model directory that does not exist)
    assert main(["serve", "--model", str(tmp_path / "missing"), "--host", "0.0.0.0", "--port", "0"]) == 2
    err = capsys.readouterr().err
    assert "serve: warning: serving 0.0.0.0 without an API key" in err and "not a model directory" in err
