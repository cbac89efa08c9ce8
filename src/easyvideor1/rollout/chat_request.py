"""One chat-completions request as ``easyvideor1 serve`` reads it: the body checked field by field
(types, ranges, finite numbers, features the server does not have), the messages rendered by the
model's chat template, and OpenAI's error shape for what cannot be served (``server.py`` is the HTTP
side)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..errors import UserError
from .sampling import SamplingConfig

DEFAULT_MAX_TOKENS = 256
MAX_CHOICES = 16  # ``n`` rows are generated as one batch: a bound on what one request may ask
# fields that change what the answer must be and that this server does not implement: refused
# when set, not ignored (a client would get a different answer than it asked for)
_UNSERVED = ("stop", "tools", "functions", "logprobs", "top_logprobs", "logit_bias", "frequency_penalty")


class BadRequest(UserError):
    """A request the server refuses: answered ``status`` (400 unless said) with the reason, the
    offending field (``param``) and OpenAI's ``code`` for it (when it has one) in OpenAI's error shape."""

    def __init__(self, message: str, param: str | None = None, status: int = 400, code: str | None = None):
        super().__init__(message)
        self.param, self.status, self.code = param, status, code


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


def check_model(body: dict[str, Any], served: str) -> None:
    """The request names the served model, or none (then it is the served one, as vLLM takes it);
    another name is answered 404 ``model_not_found`` (OpenAI's code; vLLM answers 404 too, naming
    the model it serves), never served by a model the client did not ask for."""
    model = body.get("model")
    if model is None or model == "":
        return
    if not isinstance(model, str):
        raise BadRequest(f"model must be a string, got {model!r:.40}", "model")
    if model != served:
        raise BadRequest(
            f"The model `{model:.100}` does not exist; this server serves `{served}`",
            "model",
            status=404,
            code="model_not_found",
        )


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


def reject_constant(constant: str):
    """``json.loads``' ``parse_constant``: NaN and Infinity are not JSON numbers."""
    raise BadRequest(f"the body is not JSON: {constant} is not a JSON number")


def error_body(
    message: str, status: int, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """OpenAI's error shape (``code``: the status's own unless given)."""
    kind = "server_error" if status >= 500 else "invalid_request_error"
    code = code or {401: "invalid_api_key", 404: "not_found", 408: "timeout", 413: "request_too_large"}.get(
        status
    )
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}
