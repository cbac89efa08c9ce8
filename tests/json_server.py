"""A real HTTP server on localhost that answers JSON POSTs through a Python function: the
scaffolding of the tests' scripted chat-completions servers (each decides its answers)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# handle(body) -> (status, payload, extra headers)
Handle = Callable[[dict], tuple[int, dict, dict]]


class JSONServer:
    def __init__(self, handle: Handle):
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                return

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                status, payload, headers = handle(body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                server.send(self, data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def send(self, handler: BaseHTTPRequestHandler, data: bytes) -> None:
        """Write the buffered headers and then ``data`` (a subclass may pace the bytes)."""
        handler.end_headers()
        handler.wfile.write(data)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def chat_reply(text: str) -> dict:
    """A chat-completions answer holding ``text``."""
    return {"choices": [{"message": {"role": "assistant", "content": text}}]}
