"""The one renderer of Jinja text a user wrote: a prompt template file, a benchmark spec's ``prompt``.

A template may come from a shared file, so it is treated as untrusted code:

- it runs in Jinja's immutable sandbox: no attribute starting with ``_`` (so no
  ``''.__class__.__mro__``, no ``cycler.__init__.__globals__``), no method that changes a list or a
  dict, no ``include``/``import``/``extends`` (there is no loader: a template reads no file), and
  variables it names must exist (``StrictUndefined``);
- it is bounded: ``range`` gives at most :data:`MAX_RANGE` items; every text or collection it builds
  (by ``*``, ``+``, ``~``, ``**``, a filter, a method, a format width) and the rendered text stay
  under :data:`MAX_TEXT`; a render runs at most :data:`MAX_STEPS` loop iterations and calls and at
  most :data:`TIME_LIMIT_S` seconds, checked at each of them (in the rendering thread: no thread
  or signal per render).

A template that breaks a rule raises :class:`TemplateError`, one line naming the template and the
reason. Syntax errors are raised by :func:`compile_template`, so a caller that compiles when it reads
its config or spec file finds them at start-up.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .errors import UserError

MAX_RANGE = 100_000  # items of one range()
MAX_TEXT = 1 << 20  # characters of the rendered text and of any value built on the way (1 MiB)
MAX_STEPS = 1_000_000  # loop iterations and calls of one render
TIME_LIMIT_S = 5.0  # seconds of one render
_MAX_INT_BITS = 100_000  # an integer result's size (about 30,000 digits)

# A field width or precision of a million or more, a `*` width taken from the arguments, or a
# replacement field nested in a `str.format` spec: the ways a format string asks for huge output.
_PERCENT_WIDTH = re.compile(r"%[-#0 +]*(?:\*|\d{7,})|%[-#0 +\d]*\.(?:\*|\d{7,})")
_FORMAT_WIDTH = re.compile(r"\{[^{}]*:[^{}]*(?:\{|\d{7,})")
# filters and str methods whose integer argument is the output's size
_WIDTH_FILTERS = ("center", "indent", "wordwrap")
_WIDTH_METHODS = ("center", "ljust", "rjust", "zfill", "expandtabs")


class TemplateError(UserError):
    """A user template that cannot compile or render: the message names the template and the reason."""

    def __init__(self, origin: str, reason: str) -> None:
        reason = " ".join(reason.splitlines())  # one line, whatever the exception said
        super().__init__(f"{origin}: {reason}")
        self.origin = origin
        self.reason = reason


class _Refused(Exception):
    """A template that reached a bound (raised inside a render, reported as a TemplateError)."""


@dataclasses.dataclass
class _Budget:
    steps: int
    deadline: float

    def spend(self) -> None:
        self.steps -= 1
        if self.steps < 0:
            raise _Refused(f"more than {MAX_STEPS:,} loop iterations and calls")
        if time.monotonic() > self.deadline:
            raise _Refused(f"rendering ran past its {TIME_LIMIT_S:g} s limit")


_active = threading.local()  # .budget: the render under way in this thread (None while compiling)


def _spend() -> None:
    budget = getattr(_active, "budget", None)
    if budget is not None:
        budget.spend()


def _size(value: Any, limit: int = MAX_TEXT) -> int:
    """The characters ``value`` stands for (texts, and collections of them, counted through), stopping
    once past ``limit`` so the count costs at most ``limit`` steps."""
    total, pending = 0, [value]
    while pending and total <= limit:
        item = pending.pop()
        if isinstance(item, str | bytes):
            total += len(item)
        elif isinstance(item, bool | float | None):
            total += 1
        elif isinstance(item, int):
            total += item.bit_length() // 3 + 1
        elif isinstance(item, Mapping):
            total += len(item)
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            total += len(item)
            pending.extend(item)
        else:
            total += 1
    return total


def _bounded(value: Any, what: str) -> Any:
    if _size(value) > MAX_TEXT:
        raise _Refused(f"{what} builds a value of more than {MAX_TEXT:,} characters")
    return value


def _check_format(fmt: Any, pattern: re.Pattern[str]) -> None:
    if isinstance(fmt, str) and pattern.search(fmt):
        raise _Refused(
            f"format string {fmt[:40]!r} asks for a width of a million or more (or a computed one)"
        )


def _check_width(name: str, args: tuple, kwargs: Mapping[str, Any]) -> None:
    for arg in (*args, *kwargs.values()):
        if isinstance(arg, int) and arg > MAX_TEXT:
            raise _Refused(f"{name}() with a width of {arg:,} (more than {MAX_TEXT:,})")


def _joinable(parts: Any, separator: Any) -> Any:
    """``parts`` as a list (a generator is read once, here), refused if joining it with
    ``separator`` would build a text of more than :data:`MAX_TEXT` characters."""
    if isinstance(parts, str) or not isinstance(parts, Iterable):
        return parts
    parts = list(parts)
    if isinstance(separator, str) and len(separator) * len(parts) + _size(parts) > MAX_TEXT:
        raise _Refused(f"join builds a text of more than {MAX_TEXT:,} characters")
    return parts


def _check_replace(text: Any, old: Any, new: Any) -> None:
    if isinstance(text, str) and isinstance(old, str) and isinstance(new, str):
        count = text.count(old) if old else len(text) + 1
        if len(text) + count * len(new) > MAX_TEXT:
            raise _Refused(f"replace builds a text of more than {MAX_TEXT:,} characters")


def _bounded_range(*args: int) -> range:
    numbers = range(*args)
    if len(numbers) > MAX_RANGE:
        raise _Refused(f"range() of {len(numbers):,} items (at most {MAX_RANGE:,})")
    return numbers


def _loop_guard(items: Iterable[Any]) -> Iterator[Any]:
    for item in items:
        _spend()
        yield item


def _guard_filter(name: str, func: Any) -> Any:
    passes = 1 if getattr(func, "jinja_pass_arg", None) else 0  # a context or environment first

    @functools.wraps(func)  # (keeps Jinja's pass_context / pass_environment mark)
    def guarded(*args: Any, **kwargs: Any) -> Any:
        values = args[passes:]
        if name in _WIDTH_FILTERS:
            _check_width(name, values[1:], kwargs)
        elif name == "format" and values:
            _check_format(values[0], _PERCENT_WIDTH)
        elif name == "join" and values:
            separator = values[1] if len(values) > 1 else kwargs.get("d", "")
            args = (*args[:passes], _joinable(values[0], separator), *values[1:])
        elif name == "replace" and len(values) >= 3:
            _check_replace(*values[:3])
        return _bounded(func(*args, **kwargs), f"filter {name!r}")

    return guarded


@functools.lru_cache(maxsize=1)
def _environment():
    """The one environment (compiled templates hold it; rendering in several threads is safe)."""
    import jinja2
    from jinja2 import nodes
    from jinja2.compiler import CodeGenerator
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class GuardedCodeGenerator(CodeGenerator):
        """Jinja's code generator with every loop's iterable and every ``~`` passed through a check."""

        def visit_Template(self, node, frame=None):
            for loop in node.find_all(nodes.For):
                # `environment.loop_guard`: an attribute of the environment, which no template
                # variable can shadow (a global could be redefined by `{% set %}` or a macro)
                guard = nodes.EnvironmentAttribute("loop_guard", lineno=loop.iter.lineno)
                loop.iter = nodes.Call(guard, [loop.iter], [], None, None, lineno=loop.iter.lineno)
            super().visit_Template(node, frame)

        def visit_Concat(self, node, frame):
            self.write("environment.bounded_concat(")
            super().visit_Concat(node, frame)
            self.write(")")

    class BoundedEnvironment(ImmutableSandboxedEnvironment):
        code_generator_class = GuardedCodeGenerator
        intercepted_binops = frozenset({"*", "**", "+", "%"})

        def __init__(self) -> None:
            super().__init__(undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=False)
            self.globals["range"] = _bounded_range
            self.loop_guard = _loop_guard
            self.filters = {name: _guard_filter(name, func) for name, func in self.filters.items()}

        def call_binop(self, context, operator, left, right):
            if operator == "%":
                _check_format(left, _PERCENT_WIDTH)
            if operator == "**" and isinstance(left, int) and isinstance(right, int) and right > 0:
                if max(left.bit_length(), 1) * right > _MAX_INT_BITS:
                    raise _Refused(f"{left} ** {right} is too large")
            if operator == "*":  # a repetition is sized before it is built
                sequence, count = (left, right) if isinstance(right, int) else (right, left)
                if isinstance(count, int) and isinstance(sequence, str | list | tuple):
                    if len(sequence) * count > MAX_TEXT:
                        raise _Refused(f"operator '*' builds a value of more than {MAX_TEXT:,} characters")
            return _bounded(super().call_binop(context, operator, left, right), f"operator {operator!r}")

        def bounded_concat(self, text):
            return _bounded(text, "operator '~'")

        def concat(self, pieces):
            """Jinja's join of a captured block (``{% set %}...{% endset %}``, a macro's output), bounded."""
            pieces = list(pieces)
            if sum(map(len, pieces)) > MAX_TEXT:
                raise _Refused(f"a block's output is longer than {MAX_TEXT:,} characters")
            return "".join(pieces)

        def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 (Jinja's signature)
            _spend()
            name = getattr(__obj, "__name__", "")
            # a str method (the sandbox wraps str.format, keeping the method as __wrapped__)
            text = getattr(getattr(__obj, "__wrapped__", __obj), "__self__", None)
            if isinstance(text, str):
                if name in _WIDTH_METHODS:
                    _check_width(name, args, kwargs)
                elif name in ("format", "format_map"):
                    _check_format(text, _FORMAT_WIDTH)
                elif name == "join" and args:
                    args = (_joinable(args[0], text), *args[1:])
                elif name == "replace" and len(args) >= 2:
                    _check_replace(text, *args[:2])
            elif name == "generate_lorem_ipsum":  # the `lipsum(n)` global: n paragraphs
                _check_width("lipsum", args, kwargs)
            return _bounded(
                super().call(__context, __obj, *args, **kwargs), f"calling {name or 'a function'}()"
            )

    return BoundedEnvironment()


@dataclasses.dataclass(frozen=True)
class UserTemplate:
    """A compiled user template; :meth:`render` applies the bounds."""

    origin: str
    compiled: Any

    def render(self, variables: Mapping[str, Any]) -> str:
        """The rendered text; :class:`TemplateError` naming :attr:`origin` when a rule is broken."""
        import jinja2

        _active.budget = _Budget(MAX_STEPS, time.monotonic() + TIME_LIMIT_S)
        pieces: list[str] = []
        length = 0
        try:
            for piece in self.compiled.generate(**variables):
                length += len(piece)
                if length > MAX_TEXT:
                    raise _Refused(f"the rendered text is longer than {MAX_TEXT:,} characters")
                pieces.append(piece)
        except _Refused as e:
            raise TemplateError(self.origin, str(e)) from None
        except jinja2.TemplateError as e:
            raise TemplateError(self.origin, e.message or type(e).__name__) from None
        except RecursionError:
            raise TemplateError(
                self.origin, "recursion too deep (a macro or recursive loop that calls itself)"
            ) from None
        except (ArithmeticError, LookupError, TypeError, ValueError, MemoryError) as e:
            raise TemplateError(self.origin, f"{type(e).__name__}: {e}") from None
        finally:
            _active.budget = None
        return "".join(pieces)


def read_template_file(path: str) -> str:
    """The text of the template file ``path``; a missing or unreadable file is a one-line
    :class:`~.errors.UserError` naming it (the caller says which setting named it)."""
    if not os.path.isfile(path):
        raise UserError(f"template not found: {path}")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"template {path}: cannot be read as UTF-8 text ({e})") from None


def compile_template(source: str, origin: str) -> UserTemplate:
    """``source`` compiled in the sandboxed, bounded environment; ``origin`` names it in errors
    ("prompt template x.jinja", "spec.yaml: key 'prompt'"). Syntax errors raise :class:`TemplateError`."""
    return _compile(source, origin)


@functools.lru_cache(maxsize=64)
def _compile(source: str, origin: str) -> UserTemplate:
    import jinja2

    try:
        return UserTemplate(origin, _environment().from_string(source))
    except jinja2.TemplateSyntaxError as e:
        raise TemplateError(origin, f"Jinja syntax error on line {e.lineno}: {e.message}") from None
