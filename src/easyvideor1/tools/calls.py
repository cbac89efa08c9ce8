"""Running the calls of one policy turn: parse, check, run within the budgets, never crash.

Whatever the policy writes, each call it makes gets a result it can read: a malformed body, an
unknown tool, arguments the schema refuses, a call past a budget and a :class:`~.base.ToolError`
are *invalid calls* (``tools/invalid_calls``); a tool that raises anything else or runs past
``tools.timeout_s`` is a *tool error* (``tools/errors``). Both answer with one line starting
``error:`` and the episode goes on.

The calls' raw bodies come from the model family (``family.tokens.split_tool_calls``: Qwen's
``<tool_call>{"name": ..., "arguments": ...}</tool_call>``), so this module knows no format.
"""

from __future__ import annotations

import json
import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from .base import TOOLS, ToolContext, ToolError, ToolResult, ToolSpec
from .config import ToolsConfig

OK, INVALID, ERROR = "ok", "invalid", "error"


@dataclass
class CallOutcome:
    """One call as made and answered: ``status`` is ``ok``, ``invalid`` or ``error``."""

    name: str | None
    arguments: dict[str, Any] | None
    status: str
    result: ToolResult
    seconds: float = 0.0

    def row(self) -> dict[str, Any]:
        """The call as a predictions / generations row records it (frames counted, not stored)."""
        return {
            "name": self.name,
            "arguments": self.arguments,
            "status": self.status,
            "text": self.result.text,
            "frames": self.result.frames,
            "seconds": round(self.seconds, 4),
        }


def _refused(name, arguments, message: str, status: str = INVALID) -> CallOutcome:
    return CallOutcome(name, arguments, status, ToolResult(text=f"error: {message}"))


# deeper JSON is no tool's arguments, and Python's parser would end the episode with a RecursionError
MAX_NESTING = 32


class _Unreadable(ValueError):
    """JSON a call may not carry: nested past :data:`MAX_NESTING`, or a number that is not finite."""


def _nesting(text: str) -> int:
    """How deep the arrays and objects of the JSON ``text`` nest (brackets inside strings ignored)."""
    depth = deepest = 0
    in_string = escaped = False
    for char in text:
        if in_string:
            escaped, in_string = (False, True) if escaped else (char == "\\", char != '"')
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def _not_a_number(text: str) -> float:
    raise _Unreadable(f"{text} is not a finite number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        _not_a_number(text)
    return value


def _loads(text: str) -> Any:
    """``json.loads`` bounded for text the policy wrote: a :class:`_Unreadable` for nesting deeper
    than :data:`MAX_NESTING` (checked before parsing) and for NaN, Infinity or an overflowing number."""
    depth = _nesting(text)
    if depth > MAX_NESTING:
        raise _Unreadable(f"nested {depth} deep (at most {MAX_NESTING})")
    return json.loads(text, parse_constant=_not_a_number, parse_float=_finite)


def parse_call(body: str) -> tuple[str | None, dict[str, Any] | None, str | None]:
    """``(name, arguments, None)`` of one call body, or ``(name?, None, why)`` when it is not a
    JSON object ``{"name": str, "arguments": object}`` (arguments may also be a JSON string of one,
    as OpenAI's wire format carries them) or holds what :func:`_loads` refuses."""
    try:
        call = _loads(body)
    except _Unreadable as e:
        return None, None, f"the call cannot be read: {e}"
    except ValueError as e:
        return None, None, f"the call is not valid JSON ({e.msg} at character {e.pos})"
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None, None, 'a call must be a JSON object {"name": ..., "arguments": {...}}'
    args = call.get("arguments", {})
    if isinstance(args, str):
        try:
            args = _loads(args)
        except _Unreadable as e:
            return call["name"], None, f"the arguments cannot be read: {e}"
        except ValueError:
            return call["name"], None, "arguments must be a JSON object"
    if not isinstance(args, dict):
        return call["name"], None, "arguments must be a JSON object"
    return call["name"], args, None


def _schema_error(spec: ToolSpec, args: dict[str, Any]) -> str | None:
    from jsonschema import Draft202012Validator

    errors = sorted(Draft202012Validator(spec.parameters).iter_errors(args), key=lambda e: list(e.path))
    if not errors:
        return None
    e = errors[0]
    where = ".".join(str(p) for p in e.path)
    return f"{spec.name}: {'argument ' + where + ': ' if where else ''}{e.message}"


class CallMemory(Protocol):
    """What an episode's calls share with the others of its step or job (``ToolSession``): the
    context a call runs in, and the answers to calls already made."""

    def context(self, record: Any, video_paths: list[str], max_frames: int) -> ToolContext: ...

    def remembered(
        self, ctx: ToolContext, name: str, args: dict[str, Any]
    ) -> tuple[str, ToolResult | None]: ...

    def remember(self, key: str, result: ToolResult) -> None: ...


@dataclass
class EpisodeTools:
    """The tools of one episode: what it offers, what it has spent, and its counts."""

    specs: list[ToolSpec]
    session: CallMemory
    record: Any
    video_paths: list[str]
    settings: ToolsConfig
    frames_left: int = 0
    pixels_left: int = 0
    outcomes: list[CallOutcome] = field(default_factory=list)
    refuse: str | None = None  # every call answered with this error (ToolSession.refuse)

    def __post_init__(self) -> None:
        self.frames_left = self.settings.max_frames_per_episode
        self.pixels_left = self.settings.max_pixels_per_episode
        self._offered = {TOOLS.canonical(s.name): s for s in self.specs}

    def schemas(self) -> list[dict[str, Any]]:
        """The ``tools=`` list of the chat template."""
        return [s.schema() for s in self.specs]

    def run_turn(self, bodies: list[str], allowed: bool = True) -> list[CallOutcome]:
        """Answer each call body of one policy turn (``allowed=False``: the turn had no tool turn
        left, so every call is refused)."""
        out = []
        for i, body in enumerate(bodies):
            if not allowed:
                outcome = _refused(
                    None, None, f"no tool turns left (tools.max_turns={self.settings.max_turns}); answer now"
                )
            elif self.refuse is not None:
                outcome = _refused(None, None, self.refuse, status=ERROR)
            elif i >= self.settings.max_calls_per_turn:
                outcome = _refused(None, None, f"at most {self.settings.max_calls_per_turn} calls per turn")
            else:
                outcome = self._one(body)
            self.outcomes.append(outcome)
            out.append(outcome)
        return out

    def _one(self, body: str) -> CallOutcome:
        name, args, why = parse_call(body)
        if why is not None:
            return _refused(name, args, why)
        key = TOOLS.canonical(name) if name in TOOLS else None
        spec = self._offered.get(key) if key else None
        if spec is None:
            offered = ", ".join(s.name for s in self.specs)
            return _refused(name, args, f"unknown tool {name!r}; the tools are: {offered}")
        why = _schema_error(spec, args)
        if why is not None:
            return _refused(name, args, why)
        max_frames = min(self.settings.max_frames_per_call, self.frames_left)
        if max_frames < 1:
            return _refused(
                name, args, f"the episode's frame budget ({self.settings.max_frames_per_episode}) is spent"
            )
        ctx = self.session.context(self.record, self.video_paths, max_frames)
        memo, known = self.session.remembered(ctx, spec.name, args)
        t0 = time.perf_counter()
        if known is not None:
            result, status = known, OK
        else:
            result, status = self._call(spec, ctx, args)
            if status == OK:
                self.session.remember(memo, result)
        seconds = time.perf_counter() - t0
        if status == OK and result.frames > max_frames:
            return _refused(
                name,
                args,
                f"{spec.name} returned {result.frames} frames, over the {max_frames} allowed",
                ERROR,
            )
        if status == OK and result.pixels > self.pixels_left:
            return _refused(
                name,
                args,
                f"the result's {result.pixels} pixels are over the {self.pixels_left} the episode has left",
            )
        if status == OK:
            self.frames_left -= result.frames
            self.pixels_left -= result.pixels
        return CallOutcome(spec.name, args, status, result, seconds)

    def _call(self, spec: ToolSpec, ctx, args: dict[str, Any]) -> tuple[ToolResult, str]:
        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["result"] = spec.function(ctx, args)
            except BaseException as e:  # reported to the policy and counted, never raised
                box["error"] = e

        worker = threading.Thread(target=target, name=f"tool-{spec.name}", daemon=True)
        worker.start()
        worker.join(self.settings.timeout_s)
        if worker.is_alive():
            return ToolResult(text=f"error: {spec.name} timed out after {self.settings.timeout_s:g} s"), ERROR
        error = box.get("error")
        if isinstance(error, ToolError):
            return ToolResult(text=f"error: {error}"), INVALID
        if error is not None:
            return ToolResult(text=f"error: {spec.name} failed: {type(error).__name__}: {error}"), ERROR
        result = box.get("result")
        if not isinstance(result, ToolResult):
            return ToolResult(
                text=f"error: {spec.name} returned {type(result).__name__}, not a ToolResult"
            ), ERROR
        return result, OK

    def counts(self) -> dict[str, int]:
        """This episode's ``calls``, ``invalid_calls`` and ``errors``."""
        return {
            "calls": len(self.outcomes),
            "invalid_calls": sum(o.status == INVALID for o in self.outcomes),
            "errors": sum(o.status == ERROR for o in self.outcomes),
        }
