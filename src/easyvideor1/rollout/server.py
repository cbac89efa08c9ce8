"""``easyvideor1 serve``: an OpenAI-compatible chat-completions server over the HF engine.

For a judge or generative reward model on machines without vLLM (CPU runs, tests, the demo): the
same routes ``vllm serve`` answers for text, ``POST /v1/chat/completions`` and ``GET
/v1/models``. Requests that arrive together are generated as one batch (the engine's request
queue), so concurrent clients are served concurrently. On GPUs, ``vllm serve DIR`` is the faster
server for the same clients.

Text messages only (a string ``content`` or a list of ``{"type": "text"}`` parts); the model's own
chat template renders them. Sampling: ``temperature`` (default 1, 0 greedy), ``top_p``,
``presence_penalty``, ``max_tokens`` / ``max_completion_tokens`` (default 256), ``seed``, and ``n``
choices (at most :data:`MAX_CHOICES`). ``stream: true`` answers server-sent events in OpenAI's chunk
format, token by token, ending with ``data: [DONE]``. Every request the server cannot serve as
asked (malformed JSON or HTTP framing, a field of the wrong type or range, NaN or infinity, a
feature it does not have such as ``stop`` or ``tools``, a prompt longer than the model's context)
is answered 4xx with OpenAI's error shape and never retried by a well-behaved client; 500 means the
engine itself failed.

A client that goes away cancels its generation at the next decode step; each connection has a read
timeout; with an API key every route but ``/health`` needs ``Authorization: Bearer KEY``.
"""

from __future__ import annotations

import concurrent.futures
import hmac
import ipaddress
import json
import math
import queue
import re
import select
import socket
import threading
import time
import uuid
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ..errors import UserError
from .base import Progress, Prompt, Request, Responses
from .sampling import SamplingConfig

DEFAULT_MAX_TOKENS = 256
MAX_CHOICES = 16  # ``n`` rows are generated as one batch: a bound on what one request may ask
MAX_BODY_BYTES = 16 << 20
DEFAULT_READ_TIMEOUT_S = 60.0
API_KEY_ENV = "EASYVIDEOR1_SERVE_API_KEY"
_POLL_S = 0.05  # how often a waiting request checks that its client is still connected
# fields that change what the answer must be and that this server does not implement: refused
# when set, not ignored (a client would get a different answer than it asked for)
_UNSERVED = ("stop", "tools", "functions", "logprobs", "top_logprobs", "logit_bias", "frequency_penalty")


class BadRequest(UserError):
    """A request the server refuses: answered ``status`` (400 unless said) with the reason and the
    offending field (``param``) in OpenAI's error shape."""

    def __init__(self, message: str, param: str | None = None, status: int = 400):
        super().__init__(message)
        self.param, self.status = param, status


class ClientGone(Exception):
    """The client closed its connection before its answer was complete (its generation is cancelled)."""


@dataclass
class ChatRequest:
    """One validated chat-completions request."""

    text: str  # the chat-template rendering, generation prompt included
    prompt_tokens: int
    sampling: SamplingConfig
    seed: int | None
    n: int
    stream: bool
    include_usage: bool  # stream_options.include_usage: a last chunk with the usage


def _text_content(message: dict[str, Any], i: int) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise BadRequest(
                    f"messages[{i}]: only text parts are served here, got {part!r:.80}",
                    f"messages[{i}].content",
                )
            parts.append(part["text"])
        return "".join(parts)
    raise BadRequest(
        f"messages[{i}].content must be a string or a list of text parts", f"messages[{i}].content"
    )


def render(processor, messages: Any) -> str:
    """The chat-template text of OpenAI-style ``messages`` (generation prompt added)."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list", "messages")
    chat = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
            raise BadRequest(
                f"messages[{i}] needs a role of system, user or assistant", f"messages[{i}].role"
            )
        chat.append({"role": m["role"], "content": [{"type": "text", "text": _text_content(m, i)}]})
    return processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)


def _number(
    body: dict[str, Any], key: str, default: float, low: float, high: float, low_open: bool = False
) -> float:
    """``body[key]`` (``default`` when absent or null): a finite JSON number within the bounds."""
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise BadRequest(f"{key} must be a number, got {value!r:.40}", key)
    if not math.isfinite(value) or value < low or (low_open and value == low) or value > high:
        bound = f"{'>' if low_open else '>='} {low:g}" + (f" and <= {high:g}" if math.isfinite(high) else "")
        raise BadRequest(f"{key} must be a finite number {bound}, got {value!r}", key)
    return float(value)


def _whole(
    body: dict[str, Any], key: str, default: int | None, low: int, high: float = math.inf
) -> int | None:
    """``body[key]`` (``default`` when absent or null): a whole number within the bounds."""
    value = body.get(key)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        limit = f"between {low} and {high:g}" if math.isfinite(high) else f">= {low}"
        raise BadRequest(f"{key} must be a whole number {limit}, got {value!r:.40}", key)
    return value


def _flag(body: dict[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequest(f"{key} must be true or false, got {value!r:.40}", key)
    return value


def parse_request(processor, body: dict[str, Any], max_context: int | None = None) -> ChatRequest:
    """The request ``body`` checked field by field (:class:`BadRequest` names the first bad one)."""
    for key in _UNSERVED:
        if body.get(key) not in (None, False, 0, "", [], {}):
            raise BadRequest(f"{key} is not supported by this server", key)
    response_format = body.get("response_format")
    if response_format not in (None, {"type": "text"}):
        raise BadRequest("response_format other than text is not supported by this server", "response_format")
    text = render(processor, body.get("messages"))
    prompt_tokens = len(processor.tokenizer(text)["input_ids"])
    key = "max_tokens" if body.get("max_tokens") is not None else "max_completion_tokens"
    max_tokens = _whole(body, key, DEFAULT_MAX_TOKENS, 1)
    if max_context is not None and prompt_tokens + max_tokens > max_context:
        raise BadRequest(
            f"the prompt ({prompt_tokens} tokens) plus {key} ({max_tokens}) is more than the model's context "
            f"of {max_context} tokens",
            key if prompt_tokens < max_context else "messages",
        )
    stream_options = body.get("stream_options")
    if stream_options is not None and not isinstance(stream_options, dict):
        raise BadRequest("stream_options must be an object", "stream_options")
    settings = {
        "temperature": _number(body, "temperature", 1.0, 0, math.inf),
        "top_p": _number(body, "top_p", 1.0, 0, 1, low_open=True),
        "presence_penalty": _number(body, "presence_penalty", 0.0, 0, 2),
    }
    try:
        sampling = SamplingConfig(**settings, max_new_tokens=max_tokens)
    except ValueError as e:  # the sampling section's own rules
        raise BadRequest(str(e)) from None
    return ChatRequest(
        text=text,
        prompt_tokens=prompt_tokens,
        sampling=sampling,
        seed=_whole(body, "seed", None, -(2**63), 2**63 - 1),
        n=_whole(body, "n", 1, 1, MAX_CHOICES),
        stream=_flag(body, "stream"),
        include_usage=_flag(stream_options or {}, "include_usage"),
    )


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` serves this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name (or "" for every interface): may be reachable from elsewhere
        return False


def exposure_warning(host: str, api_key: str | None) -> str | None:
    """The warning for serving every machine that can reach ``host`` with no key, or None."""
    if api_key or is_loopback(host):
        return None
    return (
        f"serving {host or 'every interface'} without an API key: anyone who can reach this port can "
        f"run the model (set {API_KEY_ENV} or --api-key)"
    )


class _ChatHandler(BaseHTTPRequestHandler):
    """One connection (HTTP/1.1, kept alive); ``chat`` is set on the subclass a server makes."""

    protocol_version = "HTTP/1.1"
    server_version = "easyvideor1"
    chat: ChatServer

    def log_message(self, fmt, *args):  # one line per request is noise for a judge
        return

    # --- answers -------------------------------------------------------------------------------

    def _answer(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_error(self, code, message=None, explain=None):
        """The base class's errors (a malformed request line, headers too long, an unknown method,
        a timeout) in OpenAI's shape too; the connection is closed after them."""
        self.close_connection = True
        headers = None
        if code == HTTPStatus.NOT_IMPLEMENTED:  # a method no route has
            code, message = HTTPStatus.METHOD_NOT_ALLOWED, f"method {self.command!r:.20} is not allowed"
            headers = {"Allow": "GET, POST"}
        self._answer(code, _error(message or HTTPStatus(code).phrase, code), headers)

    def _refuse(self, e: BadRequest, body_read: bool) -> None:
        if not body_read:  # where the next request would start is unknown: end the connection
            self.close_connection = True
        headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 else None
        self._answer(e.status, _error(str(e), e.status, e.param), headers)

    def _authorize(self) -> None:
        key = self.chat.api_key
        if key is None or self.path.rstrip("/") in ("/health", "/v1/health"):
            return
        given = self.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {key}".encode()):
            raise BadRequest("a valid API key is required: Authorization: Bearer KEY", status=401)

    # --- routes --------------------------------------------------------------------------------

    def do_GET(self):
        try:
            self._authorize()
        except BadRequest as e:
            self._refuse(e, body_read=True)
            return
        route = self.path.rstrip("/")
        if route in ("/v1/models", "/models"):
            self._answer(200, {"object": "list", "data": [{"id": self.chat.name, "object": "model"}]})
        elif route in ("/health", "/v1/health"):
            self._answer(200, {"status": "ok"})
        else:
            self._answer(404, _error(f"no route GET {self.path}", 404))

    def do_POST(self):
        body_read = False
        try:
            self._authorize()
            if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                raise BadRequest(f"no route POST {self.path}", status=404)
            raw = self._read_body()
            body_read = True
            self._complete(self.chat.parse(raw))
        except BadRequest as e:
            self._refuse(e, body_read)
        except TimeoutError:  # the client stopped sending its body
            self.close_connection = True
            self._answer(408, _error("the request body did not arrive in time", 408))
        except (ClientGone, ConnectionError):
            self.close_connection = True
        except Exception as e:  # the engine failed: the client may retry
            self._answer(500, _error(f"{type(e).__name__}: {e}", 500))

    # --- the body --------------------------------------------------------------------------------

    def _read_body(self) -> bytes:
        """The request body, framed by Content-Length or chunked transfer coding."""
        coding = self.headers.get("Transfer-Encoding")
        lengths = self.headers.get_all("Content-Length") or []
        if coding is not None:
            if lengths:
                raise BadRequest("a request with both Transfer-Encoding and Content-Length is refused")
            if coding.strip().lower() != "chunked":
                raise BadRequest(f"Transfer-Encoding {coding!r:.40} is not supported (only chunked)")
            return self._read_chunked()
        if not lengths:
            raise BadRequest("a request body needs a Content-Length (or chunked transfer coding)", status=411)
        if len(set(lengths)) > 1 or not re.fullmatch(r"[0-9]{1,12}", lengths[0].strip()):
            raise BadRequest(
                f"Content-Length must be one whole number of bytes, got {', '.join(lengths)!r:.40}"
            )
        size = int(lengths[0])
        if size > MAX_BODY_BYTES:
            raise BadRequest(f"the body is {size} bytes, more than {MAX_BODY_BYTES}", status=413)
        data = self.rfile.read(size)
        if len(data) < size:
            raise ClientGone
        return data

    def _read_chunked(self) -> bytes:
        parts, total = [], 0
        while True:
            line = self.rfile.readline(1024)
            size_text = line.split(b";", 1)[0].strip()
            if not line.endswith(b"\n") or not re.fullmatch(rb"[0-9A-Fa-f]{1,8}", size_text):
                raise BadRequest(f"a malformed chunk size line {line[:40]!r}")
            size = int(size_text, 16)
            if size == 0:
                break
            total += size
            if total > MAX_BODY_BYTES:
                raise BadRequest(f"the body is more than {MAX_BODY_BYTES} bytes", status=413)
            chunk = self.rfile.read(size)
            if len(chunk) < size or self.rfile.readline(3).rstrip(b"\r\n") != b"":
                raise BadRequest("a chunk does not match its size")
            parts.append(chunk)
        for _ in range(64):  # trailer fields, then the empty line that ends the body
            if self.rfile.readline(8192) in (b"\r\n", b"\n", b""):
                return b"".join(parts)
        raise BadRequest("too many trailer fields")

    # --- generation ------------------------------------------------------------------------------

    def _client_gone(self) -> bool:
        """Whether the client closed its end (it sends nothing more while it waits for an answer)."""
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _complete(self, request: ChatRequest) -> None:
        tokens: queue.Queue | None = queue.Queue() if request.stream else None
        progress = Progress(on_token=None if tokens is None else lambda row, token: tokens.put((row, token)))
        future = self.chat.submit(request, progress)
        try:
            if tokens is None:
                self._answer(200, self.chat.completion(request, self._wait(future)))
            else:
                self._stream(request, future, tokens)
        except (ClientGone, ConnectionError, TimeoutError):
            progress.cancelled.set()
            future.cancel()
            raise ClientGone from None

    def _wait(self, future: concurrent.futures.Future) -> Responses:
        while True:
            try:
                return future.result(timeout=_POLL_S)
            except concurrent.futures.TimeoutError:
                if self._client_gone():
                    raise ClientGone from None

    def _send_event(self, payload: dict | str) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        event = f"data: {data}\n\n".encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))

    def _stream(self, request: ChatRequest, future: concurrent.futures.Future, tokens: queue.Queue) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        chunks = _Chunks(self.chat.name)
        for row in range(request.n):
            self._send_event(chunks.delta(row, {"role": "assistant", "content": ""}))
        ids: list[list[int]] = [[] for _ in range(request.n)]
        sent = [""] * request.n

        def forward(row: int, text: str) -> None:
            if text.startswith(sent[row]) and len(text) > len(sent[row]):
                self._send_event(chunks.delta(row, {"content": text[len(sent[row]) :]}))
                sent[row] = text

        eos = set(self.chat.engine.eos_ids)
        while True:
            try:
                row, token = tokens.get(timeout=_POLL_S)
            except queue.Empty:
                if future.done() and tokens.empty():  # every token is queued before the result
                    break
                if self._client_gone():
                    raise ClientGone from None
                continue
            if token not in eos:
                ids[row].append(token)
                text = self.chat.processor.tokenizer.decode(ids[row], skip_special_tokens=False)
                if not text.endswith("\ufffd"):  # a character whose bytes span tokens waits for the rest
                    forward(row, text)
        try:
            out = future.result()
        except Exception as e:  # the engine failed mid-stream: said in the stream, then it ends
            self._send_event(_error(f"{type(e).__name__}: {e}", 500))
        else:
            for row in range(request.n):
                forward(row, out.texts[row])
                self._send_event(chunks.finish(row, _finish_reason(out, row)))
            if request.include_usage:
                self._send_event(chunks.usage(_usage(request, out)))
        self._send_event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")


class _Chunks:
    """The ``chat.completion.chunk`` objects of one streamed answer (one id, one creation time)."""

    def __init__(self, name: str):
        self.id, self.created, self.name = f"chatcmpl-{uuid.uuid4().hex[:12]}", int(time.time()), name

    def _chunk(self, choices: list, **extra) -> dict[str, Any]:
        head = {"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.name}
        return {**head, "choices": choices, **extra}

    def delta(self, row: int, delta: dict) -> dict[str, Any]:
        return self._chunk([{"index": row, "delta": delta, "finish_reason": None}])

    def finish(self, row: int, reason: str) -> dict[str, Any]:
        return self._chunk([{"index": row, "delta": {}, "finish_reason": reason}])

    def usage(self, usage: dict) -> dict[str, Any]:
        return self._chunk([], usage=usage)


def _finish_reason(out: Responses, row: int) -> str:
    return "length" if out.truncated and out.truncated[row] else "stop"


def _usage(request: ChatRequest, out: Responses) -> dict[str, int]:
    completion = int(out.mask.sum()) if out.mask.numel() else 0
    return {
        "prompt_tokens": request.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": request.prompt_tokens + completion,
    }


class ChatServer:
    """The engine behind an HTTP server; :meth:`serve_forever` blocks, :meth:`close` stops it.

    ``api_key``: when given, every route but ``/health`` needs ``Authorization: Bearer KEY``.
    ``max_context``: the model's context in tokens (a longer prompt plus ``max_tokens`` is refused).
    ``read_timeout_s``: how long a connection may stay silent while the server waits to read from it.
    """

    def __init__(
        self,
        engine,
        processor,
        name: str,
        host: str = "127.0.0.1",
        port: int = 8000,
        api_key: str | None = None,
        max_context: int | None = None,
        read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    ):
        self.engine, self.processor, self.name = engine, processor, name
        self.api_key, self.max_context = api_key or None, max_context
        handler = type("ChatHandler", (_ChatHandler,), {"chat": self, "timeout": read_timeout_s})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def parse(self, raw: bytes) -> ChatRequest:
        """A request body (JSON bytes) as a :class:`ChatRequest`."""
        try:
            body = json.loads(raw or b"{}", parse_constant=_not_json)
        except (ValueError, RecursionError) as e:
            raise BadRequest(f"the body is not JSON: {e}") from None
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        return parse_request(self.processor, body, self.max_context)

    def submit(self, request: ChatRequest, progress: Progress | None = None) -> concurrent.futures.Future:
        """Queue the generation (batched with whatever else is waiting); the future gives its rows."""
        key = f"chat-{uuid.uuid4().hex[:12]}"
        return self.engine.submit(
            Request(
                key, Prompt(request.text), request.sampling, n=request.n, seed=request.seed, progress=progress
            )
        )

    def completion(self, request: ChatRequest, out: Responses) -> dict[str, Any]:
        """The ``chat.completion`` answer of a finished generation."""
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.name,
            "choices": [
                {
                    "index": row,
                    "message": {"role": "assistant", "content": out.texts[row]},
                    "finish_reason": _finish_reason(out, row),
                }
                for row in range(request.n)
            ],
            "usage": _usage(request, out),
        }

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def start(self) -> threading.Thread:
        """Serve from a background thread (tests, a judge beside a run)."""
        thread = threading.Thread(target=self.serve_forever, name="chat-server", daemon=True)
        thread.start()
        return thread

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.engine.close()


def _not_json(constant: str):
    raise BadRequest(f"the body is not JSON: {constant} is not a JSON number")


def _error(message: str, status: int, param: str | None = None) -> dict[str, Any]:
    """OpenAI's error shape."""
    kind = "server_error" if status >= 500 else "invalid_request_error"
    code = {401: "invalid_api_key", 404: "not_found", 408: "timeout", 413: "request_too_large"}.get(status)
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def load_server(
    model_dir: str,
    name: str = "",
    host: str = "127.0.0.1",
    port: int = 8000,
    dtype: str = "float32",
    api_key: str | None = None,
    read_timeout_s: float | None = None,
):
    """A :class:`ChatServer` over the checkpoint at ``model_dir`` served by the HF engine (not
    started); ``read_timeout_s`` None: :data:`DEFAULT_READ_TIMEOUT_S`."""
    import os

    from .engines import load_engine

    engine, processor = load_engine(model_dir, "hf", dtype, max_batch=16)
    context = getattr(engine.model.config.get_text_config(), "max_position_embeddings", None)
    name = name or os.path.basename(os.path.normpath(model_dir))
    return ChatServer(
        engine, processor, name, host, port, api_key, context, read_timeout_s or DEFAULT_READ_TIMEOUT_S
    )
