"""One client for judges and generative reward models behind an OpenAI-compatible endpoint.

``vllm serve``, SGLang, ``easyvideor1 serve`` or a hosted API: anything that answers
``POST {url}/chat/completions``. Training rewards and evaluation judges share it
(``reward.judge``, :class:`JudgeConfig`).

* Requests are asynchronous: :meth:`JudgeClient.submit` returns a ``Future`` at once, and at most
  ``max_concurrency`` requests are open at a time (a thread pool over one pooled HTTP client).
* ``timeout_s`` bounds each attempt as a whole (connect, send, and the answer however slowly its
  bytes arrive: ``http_deadline.py``), not each network read.
* 429 and 5xx answers, and connection errors, are retried up to ``retries`` times with
  exponential backoff (0.5 s, 1 s, 2 s, ... capped at 30 s); a ``Retry-After`` header (seconds or
  an HTTP date) is honoured instead when the server sends one, for at most ``max_retry_wait_s``.
* An answer is read only in the chat-completions shape: ``choices[0].message.content`` is text
  (or a list of text parts, joined); anything else is an unreadable answer, never a verdict. An
  answer body of more than :data:`MAX_ANSWER_BYTES` (1 MiB) is not read past that size: a 200
  answer that long is a failed request (not retried: the server would send it again), the body of
  an error status is only quoted.
* Identical requests (same endpoint, messages, model, sampling settings, prompt template and
  verdict format) are sent once: a request that is in flight or was answered recently (the last
  ``MEMO_SIZE`` requests of this process) shares its future, and an answered one is stored on disk
  under ``cache_dir`` by the SHA-256 of that content, so a rerun sends nothing and another judge
  asks again. An entry that cannot be read, or holds JSON of another shape, is asked again and
  rewritten. A failed request is asked again once ``FAILED_TTL_S`` have passed.
* A request that still fails is a :class:`JudgeReply` with ``error`` set, never a score: callers
  report it as not scored. :attr:`JudgeClient.stats` counts requests, failures, cache hits and
  latency (``reward/judge_*`` metrics).
"""

from __future__ import annotations

import email.utils
import hashlib
import json
import logging
import math
import os
import tempfile
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..validation import at_least, non_negative, positive, require
from .judge_format import VerdictFormat, check_prompt, verdict_format

RETRIED_STATUS = frozenset({429, 500, 502, 503, 504})
ON_FAILURE = ("skip", "rule")
BACKOFF_START_S, BACKOFF_MAX_S = 0.5, 30.0
MEMO_SIZE, FAILED_TTL_S = 4096, 60.0
MAX_ANSWER_BYTES = 1 << 20  # a judge's answer is a few hundred tokens; more is not a reply to read
logger = logging.getLogger("easyvideor1.judge")


@dataclass
class JudgeConfig:
    """A judge or generative reward model behind an OpenAI-compatible endpoint (``reward.judge``).

    Parameters:
        url: The endpoint's base URL, e.g. ``http://localhost:8000/v1`` (``/chat/completions`` is
            appended unless the URL already ends with it). Empty: no endpoint judge.
        model: The ``model`` field of each request (the name the server serves).
        api_key_env: Name of the environment variable holding the API key (sent as a bearer
            token); the key itself never goes into a config file.
        prompt: The judge prompt template (``{question}``, ``{truth}``, ``{prediction}``); empty
            uses the task's or the benchmark's official prompt. Checked when the config is read:
            ``{prediction}`` must be there, no other placeholder may be, and a literal brace is
            written twice (``{{`` or ``}}``).
        verdict: How the judge's reply to ``prompt`` is read: ``default`` (the token after the
            last ``Judgement:``, a number in [0, 1]: ``Judgement: 1``, ``Judgement: 0.75``),
            ``yes_no`` (the reply's first word is Yes or No: 1 or 0), ``score_0_10`` (the token
            after the last ``Score:``, 0 to 10, ``/10`` allowed, divided by 10), or a regular
            expression with one group, whose last match's group is the verdict (a number in
            [0, 1], or yes/no). A token is a verdict only whole: ``1/2``, ``1e-9`` and ``0,9`` are
            none, and a reply with no verdict is a failed judgement (``on_failure``), never a 0.
            Any other than ``default`` needs a ``prompt`` that asks for it. A benchmark's official
            judge prompt is read in its own format.
        max_concurrency: Requests open at once.
        timeout_s: Seconds one attempt may take in all: connect, send, and the whole answer
            however slowly it arrives.
        retries: Further attempts after a 429, a 5xx or a connection error.
        max_retry_wait_s: Longest wait before a retry that a ``Retry-After`` header can ask for
            (in seconds or as a date); a longer one is cut to this.
        cache_dir: Where answers are kept by content: the endpoint, the request, the prompt
            template and the verdict format (empty: no disk cache; a rerun asks again).
        max_tokens: The judge's answer length limit.
        temperature: The judge's sampling temperature (0: greedy, reproducible).
        tasks: The reward tasks the endpoint scores (its verdict becomes their accuracy): the
            open-ended ones by default; add any task to use a generative reward model for it.
        on_failure: What a training rollout whose judge request failed gets: ``skip`` leaves it
            out of its group's advantage and of the loss (counted in ``reward/judge_failures``);
            ``rule`` scores it with the task's own rule (ROUGE for open-ended answers). In
            evaluation a failed request is always ``not_scored`` with its reason.
        stream_chunks: Training rollouts are generated in this many chunks of prompts, and each
            chunk's judge requests are sent the moment it is generated, so the judge answers while
            the later chunks generate (1: generate the whole batch, then judge).
    """

    url: str = ""
    model: str = "judge"
    api_key_env: str = ""
    prompt: str = ""
    verdict: str = "default"
    max_concurrency: int = 8
    timeout_s: float = 60.0
    retries: int = 3
    max_retry_wait_s: float = 60.0
    cache_dir: str = ""
    max_tokens: int = 256
    temperature: float = 0.0
    tasks: list[str] = field(default_factory=lambda: ["open_ended"])
    on_failure: str = "skip"
    stream_chunks: int = 4

    def __post_init__(self) -> None:
        self.tasks = [str(t) for t in self.tasks]
        require(
            self.on_failure in ON_FAILURE,
            "reward.judge.on_failure",
            f"must be one of {ON_FAILURE}",
            self.on_failure,
        )
        at_least("reward.judge.stream_chunks", self.stream_chunks, 1)
        at_least("reward.judge.max_concurrency", self.max_concurrency, 1)
        positive("reward.judge.timeout_s", self.timeout_s)
        non_negative("reward.judge.retries", self.retries)
        non_negative("reward.judge.max_retry_wait_s", self.max_retry_wait_s)
        if self.prompt:
            check_prompt(self.prompt)
        verdict_format(self.verdict)
        require(
            bool(self.prompt) or self.verdict == "default",
            "reward.judge.verdict",
            "needs a reward.judge.prompt that asks for that format (the default prompt asks for "
            "'Judgement: 1' or 'Judgement: 0')",
            self.verdict,
        )
        at_least("reward.judge.max_tokens", self.max_tokens, 1)
        non_negative("reward.judge.temperature", self.temperature)
        if self.url:
            require(
                self.url.startswith(("http://", "https://")),
                "reward.judge.url",
                "must start with http:// or https://",
                self.url,
            )

    @property
    def enabled(self) -> bool:
        return bool(self.url)

    @property
    def endpoint(self) -> str:
        url = self.url.rstrip("/")
        return url if url.endswith("/chat/completions") else f"{url}/chat/completions"

    @property
    def verdict_format(self) -> VerdictFormat:
        """How a reply to this config's prompt is read (``verdict``)."""
        return verdict_format(self.verdict)

    @property
    def score_workers(self) -> int:
        """Threads that should score rows concurrently (evaluation, validation, curation): the
        request limit when the endpoint judges, else 0 (score in line)."""
        return self.max_concurrency if self.enabled else 0

    def client_key(self) -> tuple:
        """What makes two configs need different clients (the scoring settings do not)."""
        return (
            self.endpoint,
            self.api_key_env,
            self.max_concurrency,
            self.timeout_s,
            self.retries,
            self.max_retry_wait_s,
            self.cache_dir,
        )


@dataclass
class JudgeReply:
    """The judge's answer text, or why there is none (``error``: then the sample is not scored)."""

    text: str | None
    error: str | None = None
    cached: bool = False
    latency_s: float = 0.0
    attempts: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class JudgeStats:
    """What a client did so far (the ``reward/judge_*`` metrics)."""

    requests: int = 0  # HTTP attempts sent
    answered: int = 0
    shared: int = 0  # answered by a request in flight or just made (no request of its own)
    failures: int = 0
    cache_hits: int = 0
    latency_s: list[float] = field(default_factory=list)

    def metrics(self) -> dict[str, float]:
        lat = self.latency_s
        return {
            "reward/judge_failures": float(self.failures),
            "reward/judge_cache_hits": float(self.cache_hits),
            "reward/judge_requests": float(self.requests),
            "reward/judge_latency_s": sum(lat) / len(lat) if lat else 0.0,
        }


class JudgeClient:
    """Concurrent, retrying, caching chat-completions client (see the module docstring).

    Requests carry ``cfg.model``, ``max_tokens`` and ``temperature`` of the config passed to
    :meth:`submit` (default: the client's), so one client serves configs that differ only there.
    """

    def __init__(self, cfg: JudgeConfig):
        if not cfg.enabled:
            raise ConfigError("reward.judge.url is not set: give an OpenAI-compatible endpoint")
        import httpx

        self.cfg = cfg
        headers = {"Content-Type": "application/json"}
        if cfg.api_key_env:
            key = os.environ.get(cfg.api_key_env)
            if not key:
                raise ConfigError(
                    f"reward.judge.api_key_env: the environment variable {cfg.api_key_env} is not set"
                )
            headers["Authorization"] = f"Bearer {key}"
        limits = httpx.Limits(
            max_connections=cfg.max_concurrency, max_keepalive_connections=cfg.max_concurrency
        )
        self._http = httpx.Client(headers=headers, timeout=cfg.timeout_s, limits=limits)
        from .http_deadline import bound_by_deadline  # httpcore, as httpx: only where a client is made

        bound_by_deadline(self._http)
        self._pool = ThreadPoolExecutor(cfg.max_concurrency, thread_name_prefix="judge")
        self._recent: OrderedDict[str, tuple[Future, float]] = OrderedDict()
        self._lock = threading.Lock()
        self.stats = JudgeStats()
        self._cache = Path(cfg.cache_dir) if cfg.cache_dir else None

    # ---------------------------------------------------------------------------------- requests
    def body(self, messages: list[dict[str, Any]], cfg: JudgeConfig | None = None) -> dict[str, Any]:
        c = cfg or self.cfg
        return {
            "model": c.model,
            "messages": messages,
            "temperature": c.temperature,
            "max_tokens": c.max_tokens,
        }

    def submit(self, messages: list[dict[str, Any]], cfg: JudgeConfig | None = None) -> Future:
        """A ``Future`` of the :class:`JudgeReply` to ``messages`` (chat-completions messages)."""
        c = cfg or self.cfg
        body = self.body(messages, c)
        # the endpoint, template and verdict format too: another judge, or the same judge asked
        # for another format, does not reuse these answers
        key = content_key(
            {"endpoint": self.cfg.endpoint, "request": body, "prompt": c.prompt, "verdict": c.verdict}
        )
        with self._lock:
            if key in self._recent:  # the same request on its way or just answered: one answer for both
                future, sent = self._recent[key]
                failed = future.done() and not future.result().ok
                if not failed or time.monotonic() - sent < FAILED_TTL_S:
                    self._recent.move_to_end(key)
                    self.stats.shared += 1
                    return future
            cached = self._read_cache(key, body)
            if cached is not None:
                self.stats.cache_hits += 1
                done: Future = Future()
                done.set_result(JudgeReply(cached, cached=True))
                return done
            future = self._pool.submit(self._ask, key, body)
            self._recent[key] = (future, time.monotonic())
            while len(self._recent) > MEMO_SIZE:
                self._recent.popitem(last=False)
        return future

    def ask(self, messages: list[dict[str, Any]], cfg: JudgeConfig | None = None) -> JudgeReply:
        """:meth:`submit` and wait."""
        return self.submit(messages, cfg).result()

    def _ask(self, key: str, body: dict[str, Any]) -> JudgeReply:
        try:
            reply = self._send(body)
        except Exception as error:  # a bug, not the endpoint: still an answer with its reason
            reply = JudgeReply(None, error=f"{type(error).__name__}: {error}")
        with self._lock:
            if reply.ok:
                self.stats.answered += 1
                self.stats.latency_s.append(reply.latency_s)
            else:
                self.stats.failures += 1
        if reply.ok:
            try:
                self._write_cache(key, body, reply.text)
            except OSError as error:  # the answer stands; only the rerun will ask again
                logger.warning("judge cache %s: cannot write an entry (%s)", self._cache, error)
        return reply

    def _send(self, body: dict[str, Any]) -> JudgeReply:
        import httpx

        from .http_deadline import deadline

        t0 = time.perf_counter()
        attempts, last = 0, "no attempt"
        while True:
            attempts += 1
            with self._lock:
                self.stats.requests += 1
            wait = None
            try:
                with deadline(self.cfg.timeout_s):
                    r, data, whole = self._post(body)
            except httpx.TimeoutException:
                last = f"timed out after {self.cfg.timeout_s:g} s"
            except httpx.HTTPError as e:
                last = f"{type(e).__name__}: {e}"
            else:
                shown = data[:200].decode("utf-8", "replace")
                if r.status_code == 200:
                    if not whole:  # never parsed: a reply this long is no verdict
                        reason = f"answer longer than {MAX_ANSWER_BYTES} bytes, not read: {shown!r}"
                        return self._failed(reason, t0, attempts)
                    try:
                        text = answer_text(json.loads(data))
                    except (ValueError, UnreadableAnswer) as error:  # not JSON, or not that shape
                        return self._failed(f"unreadable answer ({error}): {shown!r}", t0, attempts)
                    return JudgeReply(text, latency_s=time.perf_counter() - t0, attempts=attempts)
                last = f"HTTP {r.status_code}: {shown}"
                if r.status_code not in RETRIED_STATUS:
                    return self._failed(last, t0, attempts)
                wait = retry_after(r.headers.get("retry-after"))
                if wait is not None and wait > self.cfg.max_retry_wait_s:
                    logger.warning(
                        "judge %s asks to retry in %.0f s; waiting reward.judge.max_retry_wait_s=%g s",
                        self.cfg.endpoint,
                        wait,
                        self.cfg.max_retry_wait_s,
                    )
                    wait = self.cfg.max_retry_wait_s
            if attempts > self.cfg.retries:
                return self._failed(last, t0, attempts)
            time.sleep(
                wait if wait is not None else min(BACKOFF_MAX_S, BACKOFF_START_S * 2 ** (attempts - 1))
            )

    def _post(self, body: dict[str, Any]):
        """(the response, at most :data:`MAX_ANSWER_BYTES` of its body, whether that is all of it):
        a longer answer is not read further, so its size costs no memory."""
        with self._http.stream("POST", self.cfg.endpoint, json=body) as r:
            data, whole = bytearray(), True
            for chunk in r.iter_bytes():
                data += chunk
                if len(data) > MAX_ANSWER_BYTES:
                    whole = False
                    break
        return r, bytes(data[:MAX_ANSWER_BYTES]), whole

    @staticmethod
    def _failed(reason: str, t0: float, attempts: int) -> JudgeReply:
        return JudgeReply(None, error=reason, latency_s=time.perf_counter() - t0, attempts=attempts)

    # ------------------------------------------------------------------------------------- cache
    def _path(self, key: str) -> Path:
        return self._cache / key[:2] / f"{key}.json"

    def _read_cache(self, key: str, body: dict[str, Any]) -> str | None:
        """The answer stored for ``key``, or None: no entry, a damaged one, or JSON of another
        shape than ``{"request": body, "answer": text}`` (then asked again, and rewritten)."""
        if self._cache is None:
            return None
        try:
            entry = json.loads(self._path(key).read_text())
        except (ValueError, OSError):
            return None
        if not isinstance(entry, dict) or entry.get("request") != body:
            return None
        answer = entry.get("answer")
        return answer if isinstance(answer, str) else None

    def _write_cache(self, key: str, body: dict[str, Any], text: str) -> None:
        if self._cache is None:
            return
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        # written whole then renamed: a reader never sees half an entry
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump({"request": body, "answer": text}, f)
        os.replace(tmp, path)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self._http.close()


_clients: dict[tuple, JudgeClient] = {}
_clients_lock = threading.Lock()


def shared_client(cfg: JudgeConfig) -> JudgeClient:
    """This process's client for ``cfg``'s endpoint (made on first use; one pool, one cache, one
    set of counters for every caller: rewards, evaluation scorers, validation)."""
    key = cfg.client_key()
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = JudgeClient(cfg)
        return client


def content_key(body: dict[str, Any]) -> str:
    """SHA-256 of a request's content (messages, model, sampling settings), canonical JSON."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


class UnreadableAnswer(Exception):
    """A 200 answer that is not a chat completion with text content (the request failed)."""


def answer_text(payload: Any) -> str:
    """The text of a chat-completions answer: ``choices[0].message.content``, a string (none: "")
    or a list of text parts (joined); :class:`UnreadableAnswer` naming what is not that shape."""
    try:
        content = payload["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise UnreadableAnswer("no choices[0].message.content") from None
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(
        isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
        for part in content
    ):
        return "".join(part["text"] for part in content)
    raise UnreadableAnswer(f"content is a {type(content).__name__}, not text")


def retry_after(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks for (a number of seconds or an HTTP date), or None
    for a header that is neither (the client's own backoff then applies)."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = email.utils.parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError, OverflowError, IndexError):
            return None
    return None if math.isnan(seconds) else max(0.0, seconds)
