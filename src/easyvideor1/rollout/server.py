"""``easyvideor1 serve``: an OpenAI-compatible chat-completions server over the HF engine.

For a judge or generative reward model on machines without vLLM (CPU runs, tests, the demo): the
same routes ``vllm serve`` answers for text, ``POST /v1/chat/completions`` and ``GET
/v1/models``. Requests that arrive together are generated as one batch (the engine's request
queue), so concurrent clients are served concurrently. On GPUs, ``vllm serve DIR`` is the faster
server for the same clients.

Text messages only (a string ``content`` or a list of ``{"type": "text"}`` parts); the model's own
chat template renders them. Sampling: ``temperature`` (default 1, 0 greedy), ``top_p``,
``presence_penalty``, ``max_tokens`` / ``max_completion_tokens`` (default 256), ``seed``, and ``n``
choices (at most ``chat_request.MAX_CHOICES``; the checks are ``chat_request.py``). ``stream: true`` answers server-sent events in OpenAI's chunk
format, token by token, ending with ``data: [DONE]``. Every request the server cannot serve as
asked (malformed JSON or HTTP framing, a field of the wrong type or range, NaN or infinity, a
feature it does not have such as ``stop`` or ``tools``, a prompt longer than the model's context,
a ``model`` other than the served name: 404 ``model_not_found``) is answered 4xx with OpenAI's error shape and never retried by a well-behaved client; 500 means the
engine itself failed.

A client that goes away cancels its generation at the next decode step; each connection has a read
timeout; with an API key every route but ``/health`` needs ``Authorization: Bearer KEY``.
"""

from __future__ import annotations

import concurrent.futures
import hmac
import ipaddress
import json
import queue
import re
import select
import socket
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .base import Progress, Prompt, Request, Responses
from .chat_request import BadRequest, ChatRequest, check_model, error_body, parse_request, reject_constant

MAX_BODY_BYTES = 16 << 20
DEFAULT_READ_TIMEOUT_S = 60.0
API_KEY_ENV = "EASYVIDEOR1_SERVE_API_KEY"
_POLL_S = 0.05  # how often a waiting request checks that its client is still connected


class ClientGone(Exception):
    """The client closed its connection before its answer was complete (its generation is cancelled)."""


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
        self._answer(code, error_body(message or HTTPStatus(code).phrase, code), headers)

    def _refuse(self, e: BadRequest, body_read: bool) -> None:
        if not body_read:  # where the next request would start is unknown: end the connection
            self.close_connection = True
        headers = {"WWW-Authenticate": "Bearer"} if e.status == 401 else None
        self._answer(e.status, error_body(str(e), e.status, e.param, e.code), headers)

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
            self._answer(404, error_body(f"no route GET {self.path}", 404))

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
            self._answer(408, error_body("the request body did not arrive in time", 408))
        except (ClientGone, ConnectionError):
            self.close_connection = True
        except Exception as e:  # the engine failed: the client may retry
            self._answer(500, error_body(f"{type(e).__name__}: {e}", 500))

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
            self._send_event(error_body(f"{type(e).__name__}: {e}", 500))
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
            body = json.loads(raw or b"{}", parse_constant=reject_constant)
        except (ValueError, RecursionError) as e:
            raise BadRequest(f"the body is not JSON: {e}") from None
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        check_model(body, self.name)
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
