"""``easyvideor1 serve``: an OpenAI-compatible chat-completions server over the HF engine.

For a judge or generative reward model on machines without vLLM (CPU runs, tests, the demo): the
same routes ``vllm serve`` answers for text, ``POST /v1/chat/completions`` and ``GET
/v1/models``. Requests that arrive together are generated as one batch (the engine's request
queue), so concurrent clients are served concurrently. On GPUs, ``vllm serve DIR`` is the faster
server for the same clients.

Text messages only (a string ``content`` or a list of ``{"type": "text"}`` parts); the model's own
chat template renders them. Sampling: ``temperature`` (default 1, 0 greedy), ``top_p``,
``max_tokens`` (default 256), ``seed``. A bad request is answered 400 with OpenAI's error shape.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .base import Prompt, Request
from .sampling import SamplingConfig

DEFAULT_MAX_TOKENS = 256


class BadRequest(ValueError):
    """A request the server refuses (answered 400, the reason in OpenAI's error shape)."""


def _text_content(message: dict[str, Any], i: int) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text":
                raise BadRequest(f"messages[{i}]: only text parts are served here, got {part!r:.80}")
            parts.append(str(part.get("text", "")))
        return "".join(parts)
    raise BadRequest(f"messages[{i}].content must be a string or a list of text parts")


def render(processor, messages: Any) -> str:
    """The chat-template text of OpenAI-style ``messages`` (generation prompt added)."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages must be a non-empty list")
    chat = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
            raise BadRequest(f"messages[{i}] needs a role of system, user or assistant")
        chat.append({"role": m["role"], "content": [{"type": "text", "text": _text_content(m, i)}]})
    return processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)


def sampling_of(body: dict[str, Any]) -> tuple[SamplingConfig, int | None]:
    """The request's sampling settings and seed."""
    try:
        temperature = float(body.get("temperature", 1.0))
        top_p = float(body.get("top_p", 1.0))
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or DEFAULT_MAX_TOKENS)
        seed = body.get("seed")
        seed = None if seed is None else int(seed)
    except (TypeError, ValueError) as e:
        raise BadRequest(f"bad sampling field: {e}") from None
    if temperature < 0 or not 0 < top_p <= 1 or max_tokens < 1:
        raise BadRequest("temperature must be >= 0, top_p in (0, 1], max_tokens >= 1")
    return SamplingConfig(temperature=temperature, top_p=top_p, max_new_tokens=max_tokens), seed


class ChatServer:
    """The engine behind an HTTP server; :meth:`serve_forever` blocks, :meth:`close` stops it."""

    def __init__(self, engine, processor, name: str, host: str = "127.0.0.1", port: int = 8000):
        self.engine, self.processor, self.name = engine, processor, name
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):  # one line per request is noise for a judge
                return

            def _answer(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                if self.path.rstrip("/") in ("/v1/models", "/models"):
                    self._answer(200, {"object": "list", "data": [{"id": server.name, "object": "model"}]})
                elif self.path.rstrip("/") in ("/health", "/v1/health"):
                    self._answer(200, {"status": "ok"})
                else:
                    self._answer(404, _error(f"no route {self.path}", "not_found"))

            def do_POST(self):
                if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
                    self._answer(404, _error(f"no route {self.path}", "not_found"))
                    return
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                    try:
                        body = json.loads(self.rfile.read(length) or b"{}")
                    except ValueError:
                        raise BadRequest("the body is not JSON") from None
                    if not isinstance(body, dict):
                        raise BadRequest("the body must be a JSON object")
                    self._answer(200, server.complete(body))
                except BadRequest as e:
                    self._answer(400, _error(str(e), "invalid_request_error"))
                except Exception as e:  # the engine failed: the client may retry
                    self._answer(500, _error(f"{type(e).__name__}: {e}", "server_error"))

        self.httpd = ThreadingHTTPServer((host, port), Handler)
        self.httpd.daemon_threads = True

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """One chat completion: render, generate (batched with whatever else is waiting), answer."""
        text = render(self.processor, body.get("messages"))
        sampling, seed = sampling_of(body)
        rid = uuid.uuid4().hex[:12]
        out = self.engine.submit(Request(f"chat-{rid}", Prompt(text), sampling, n=1, seed=seed)).result()
        prompt_tokens = len(self.processor.tokenizer(text)["input_ids"])
        completion = int(out.mask.sum()) if out.mask.numel() else 0
        return {
            "id": f"chatcmpl-{rid}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": out.texts[0]},
                    "finish_reason": "length" if out.truncated and out.truncated[0] else "stop",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion,
                "total_tokens": prompt_tokens + completion,
            },
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


def _error(message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind}}


def load_server(
    model_dir: str, name: str = "", host: str = "127.0.0.1", port: int = 8000, dtype: str = "float32"
):
    """A :class:`ChatServer` over the checkpoint at ``model_dir`` served by the HF engine (not
    started)."""
    import os

    from .engines import load_engine

    engine, processor = load_engine(model_dir, "hf", dtype, max_batch=16)
    return ChatServer(engine, processor, name or os.path.basename(os.path.normpath(model_dir)), host, port)
