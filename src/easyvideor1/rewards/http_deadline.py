"""A total deadline for an HTTP request made with ``httpx``, however the server paces its bytes.

``httpx`` timeouts bound each network operation: a server that sends one byte every half second
(of its headers or of its body) resets the read timeout at every byte and holds the request for
ever. :func:`bound_by_deadline` wraps the network layer of a client so that every connect, read
and write is given at most the time left until the deadline of the request the calling thread is
making (:func:`deadline`), and fails with the client's own timeout error once it has passed. One
client serves many threads, each with its own deadline; a request outside :func:`deadline` keeps
the client's per-operation timeouts.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpcore

_current = threading.local()


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Requests the calling thread makes inside this block end, sent or not, ``seconds`` from now."""
    _current.at = time.monotonic() + seconds
    try:
        yield
    finally:
        _current.at = None


def _left(timeout: float | None, expired: type[Exception]) -> float | None:
    """The timeout of one network operation: the client's, cut to what is left of the deadline."""
    at = getattr(_current, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:  # a socket timeout of 0 would mean non-blocking, not "expired"
        raise expired("the request's deadline passed")
    return left if timeout is None else min(timeout, left)


class _Stream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream):
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context, server_hostname=None, timeout=None) -> httpcore.NetworkStream:
        timeout = _left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._stream.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str):
        return self._stream.get_extra_info(info)


class _Backend(httpcore.NetworkBackend):
    def __init__(self, backend: httpcore.NetworkBackend):
        self._backend = backend

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        timeout = _left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._backend.connect_tcp(host, port, timeout, local_address, socket_options))

    def connect_unix_socket(self, path, timeout=None, socket_options=None):
        timeout = _left(timeout, httpcore.ConnectTimeout)
        return _Stream(self._backend.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


def bound_by_deadline(client) -> None:
    """Make every transport of the ``httpx.Client`` (its own, and those of proxies taken from the
    environment) honour :func:`deadline`."""
    # a mount of None is a host exempt from the proxy: its requests go through client._transport
    transports = [client._transport, *(t for t in client._mounts.values() if t is not None)]
    for transport in transports:
        pool = getattr(transport, "_pool", None)
        if not isinstance(getattr(pool, "_network_backend", None), httpcore.NetworkBackend):
            # httpx keeps its connection pool here; a version that does not would lose the deadline
            raise RuntimeError(f"cannot bound the requests of {transport!r} by a deadline")
        pool._network_backend = _Backend(pool._network_backend)
