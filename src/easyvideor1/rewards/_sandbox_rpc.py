"""Assertion tests judged by a process that never runs the program (imported inside the sandbox only).

Trust model. The program under test and the test code run in two separate sandboxed processes,
each (as root) under its own fresh uid and pid namespace, so neither can see, signal, trace or
read the memory of the other (`sandbox.py` describes the non-root case), joined by one socket:

* the *server* is the program's own process: after the program's top-level code it answers
  requests on the socket ("look up this global", "call this object with these arguments",
  "iterate it"), sending back results as plain data (numbers, strings, bytes, lists, tuples, dicts,
  sets, ranges, fractions, decimals, namedtuples, deques) and anything else as an opaque handle;
* the *judge* runs the test statements (`assert add(1, 2) == 3`, HumanEval's `check(candidate)`)
  with the program's names bound to proxies of those handles, each test within the per-test time
  limit, and alone writes the verdicts, on a socket the program never holds.

Everything in the program's process is untrusted, this module's server code included: the program
may patch it, answer anything or nothing, or die. That is harmless, because all it can ever send is
plain data, and every comparison, `assert`, `AssertionError`, builtin and exception handler of a
test runs in the judge on that data: an object whose `__eq__` always returns True, a patched
`AssertionError`, `sys.exit`/`os._exit`, `atexit` hooks, fake result lines, frame or `gc` inspection
(there is no token to find: the expected values never enter the program's process) cannot make a
test pass; only sending the values the test expects can, which is what solving it means. Handles
support calls, attributes, indexing, `len`, `bool`, `str`/`repr` and iteration (each answer is again
data or a handle); `==`, ordering and arithmetic on a handle are the judge's own (identity, or
TypeError), so no object of the program takes part in a comparison. Names a test reads resolve to
the judge's builtins, and to the judge's standard-library modules where the tests use them as modules
(a program cannot redefine `abs` or `math.isclose` for the test), else to the program's globals.
Tests that `eval` text the program returns hand it the judge: such tests trust the program by
construction. Mutated list/dict/set arguments are copied back, so tests of in-place functions work;
what a test passes to the program must be plain data or handles (not, say, a test's own lambda).
"""

import ast
import builtins
import importlib
import importlib.util
import json
import os
import signal
import sys
import sysconfig

from _sandbox_wire import Channel, MessageTooLong, from_wire, to_wire

ITERATION_BATCH = 256
_BUILTIN_NAMES = frozenset(dir(builtins))
_STDLIB_MODULES = getattr(sys, "stdlib_module_names", None)  # Python >= 3.10


def _is_stdlib(name):
    """Whether `name` is a standard-library module of the judge's interpreter."""
    if _STDLIB_MODULES is not None:
        return name in _STDLIB_MODULES
    try:  # older interpreters: where the module would be found
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return False
    origin = str(getattr(spec, "origin", None) or "")
    stdlib = sysconfig.get_paths()["stdlib"]
    return origin in ("built-in", "frozen") or (origin.startswith(stdlib) and "-packages" not in origin)


class RemoteError(Exception):
    """The program raised an exception that is not a builtin one (or cannot be rebuilt as one)."""


class ProgramGone(ConnectionError):
    """The program's end of the socket closed or broke the protocol: no later test can pass."""


class TestTimeout(BaseException):
    """A test ran past its wall-clock limit (raised by the judge's alarm handler)."""


# --- server: runs in the program's process after its top-level code ---


def serve(fd, namespace, started):
    """Answer the judge's requests until it closes the socket (the program's process)."""
    channel = Channel(fd)
    channel.send({"ready": bool(started)})
    if not started:
        return
    handles = {}

    def register(value):
        handles[len(handles) + 1] = value
        return {"h": len(handles)}

    while True:
        request = channel.receive()
        if request is None:
            return
        reply = {"id": request.get("id")}
        try:
            reply.update(_answer(request, namespace, handles, register))
        except BaseException as error:  # the program's exception becomes the test's
            reply = {"id": request.get("id"), "raise": _builtin_kind(error), "message": _text(error)}
        channel.send(reply)


def _builtin_kind(error):
    """The nearest builtin class of an exception (a program's `class Invalid(ValueError)`: ValueError)."""
    for kind in type(error).__mro__:
        if kind.__module__ == "builtins":
            return kind.__name__
    return "Exception"


def _text(error):
    try:
        return str(error)[:500]
    except BaseException:
        return ""


def _answer(request, namespace, handles, register):
    op = request["op"]
    if op == "get":
        name = request["name"]
        if name not in namespace:
            raise NameError(f"name {name!r} is not defined")
        return {"value": to_wire(namespace[name], register)}
    target = handles[request["h"]]
    if op == "call":
        args = [from_wire(arg, handles.__getitem__) for arg in request["args"]]
        kwargs = {key: from_wire(arg, handles.__getitem__) for key, arg in request["kwargs"].items()}
        value = target(*args, **kwargs)
        after = [_mutable_after(arg) for arg in args]
        return {"value": to_wire(value, register), "after": after}
    if op == "next":
        items, done = [], False
        count = request.get("n")
        count = min(count, ITERATION_BATCH) if type(count) is int and count > 0 else 1
        for _ in range(count):
            try:
                items.append(next(target))
            except StopIteration:
                done = True
                break
        return {"value": to_wire(items, register), "done": done}
    simple = {
        "attr": lambda: getattr(target, request["name"]),
        "item": lambda: target[from_wire(request["key"], handles.__getitem__)],
        "len": lambda: len(target),
        "bool": lambda: bool(target),
        "str": lambda: str(target),
        "repr": lambda: repr(target),
    }
    if op == "iter":
        return {"value": register(iter(target))}
    return {"value": to_wire(simple[op](), register)}


def _mutable_after(arg):
    if not isinstance(arg, (list, dict, set, bytearray)):
        return None
    try:
        return to_wire(arg, _refuse)
    except (TypeError, ValueError, RecursionError):
        return None


def _refuse(value):
    raise TypeError(f"{type(value).__name__} is not plain data")


# --- judge: runs the tests, never the program ---


class Link:
    """The judge's end of the socket: one request at a time, replies matched by id."""

    def __init__(self, fd):
        self.channel = Channel(fd)
        self._next_id = 0
        self.lost = False

    def request(self, op, **fields):
        self._next_id += 1
        request_id = self._next_id
        try:
            self.channel.send({"id": request_id, "op": op, **fields})
            while True:
                reply = self.channel.receive()
                if reply is None:
                    raise EOFError("the program closed the connection")
                if not isinstance(reply, dict):
                    continue
                if reply.get("id") == request_id:
                    break
        except (OSError, EOFError, MessageTooLong) as error:
            self.lost = True
            raise ProgramGone(str(error)) from None
        except (ValueError, RecursionError):  # one unreadable message: this request fails
            raise RemoteError("malformed reply") from None
        if "raise" in reply:
            raise _rebuilt_exception(reply.get("raise"), reply.get("message"))
        return reply, from_wire(reply.get("value"), self.remote)

    def remote(self, handle_id):
        return Remote(self, handle_id)

    def call(self, handle_id, args, kwargs):
        encode = _judge_encoder
        reply, value = self.request(
            "call",
            h=handle_id,
            args=[to_wire(arg, encode) for arg in args],
            kwargs={str(key): to_wire(arg, encode) for key, arg in kwargs.items()},
        )
        after = reply.get("after")
        if isinstance(after, list) and len(after) == len(args):
            for index, arg in enumerate(args):  # no zip(strict=): the sandbox's Python may be older
                if after[index] is not None:
                    _copy_back(arg, from_wire(after[index], _no_handles))
        return value


def _judge_encoder(value):
    if isinstance(value, Remote):
        return {"h": value._id}
    raise TypeError(f"a {type(value).__name__} cannot be passed to the program")


def _no_handles(_):
    raise ValueError("handle in copied-back argument")


def _copy_back(original, state):
    if isinstance(original, (list, bytearray)) and type(state) is type(original):
        original[:] = state
    elif isinstance(original, (dict, set)) and type(state) is type(original):
        original.clear()
        original.update(state)


def _rebuilt_exception(name, message):
    kind = getattr(builtins, str(name), None)
    message = str(message)
    if isinstance(kind, type) and issubclass(kind, Exception):
        try:
            return kind(message)
        except Exception:
            pass
    return RemoteError(f"{name}: {message}")


class Remote:
    """A proxy of one object of the program; equality and hashing are the proxy's own (identity)."""

    __slots__ = ("_link", "_id")

    def __init__(self, link, handle_id):
        object.__setattr__(self, "_link", link)
        object.__setattr__(self, "_id", handle_id)

    def _ask(self, op, **fields):
        return self._link.request(op, h=self._id, **fields)[1]

    def __call__(self, *args, **kwargs):
        return self._link.call(self._id, args, kwargs)

    def __getattr__(self, name):
        if name.startswith("__") and name not in ("__name__", "__qualname__"):
            raise AttributeError(name)  # protocols probed by the judge's own code stay local
        return self._ask("attr", name=name)

    def __getitem__(self, key):
        return self._ask("item", key=to_wire(key, _judge_encoder))

    def __len__(self):
        return self._ask("len")

    def __bool__(self):
        return self._ask("bool") is True

    def __str__(self):
        return str(self._ask("str"))

    def __repr__(self):
        return str(self._ask("repr"))

    def __next__(self):  # `next(generator)` in a test: exactly one item
        reply, items = self._link.request("next", h=self._id, n=1)
        if not isinstance(items, list):
            raise TypeError("malformed iteration reply")
        if not items:
            raise StopIteration
        return items[0]

    def __iter__(self):
        iterator = self._ask("iter")
        if not isinstance(iterator, Remote):
            raise TypeError("not an iterator")
        return _RemoteIterator(self._link, iterator._id)


class _RemoteIterator:
    """Iterates a program's iterator in batches that double from 1 item, so a loop that stops early
    takes at most about twice the items it used from a generator with side effects."""

    def __init__(self, link, handle_id):
        self._link, self._id, self._items, self._done, self._batch = link, handle_id, [], False, 1

    def __iter__(self):
        return self

    def __next__(self):
        while not self._items:
            if self._done:
                raise StopIteration
            reply, items = self._link.request("next", h=self._id, n=self._batch)
            self._batch = min(2 * self._batch, ITERATION_BATCH)
            self._done = reply.get("done") is True
            if not isinstance(items, list):
                raise TypeError("malformed iteration reply")
            self._items = items[::-1]
        return self._items.pop()


class _TestNamespace(dict):
    """The tests' globals: their own names, then the judge's builtins, then the program's globals
    (looked up at each use, so values the program changes stay current).

    A standard-library module name that the tests use as a module (`math.isclose(...)`) is the
    judge's module, whatever the program bound to it; used otherwise (a program function called
    `select`) it is the program's, falling back to the judge's module when the program lacks it.
    """

    def __init__(self, link, module_names):
        super().__init__(__name__="__main__", __builtins__=builtins)
        self._link = link
        self._module_names = module_names

    def __missing__(self, name):
        if name in _BUILTIN_NAMES:
            raise KeyError(name)  # the interpreter then takes the judge's builtin
        if name in self._module_names:
            return importlib.import_module(name)
        try:
            return self._link.request("get", name=name)[1]
        except NameError:
            if _is_stdlib(name):
                try:
                    return importlib.import_module(name)
                except ImportError:
                    pass
            raise KeyError(name) from None


def _module_names(tests):
    """Standard-library module names the tests read an attribute of (`math` in `math.pi`)."""
    names = set()
    for code in tests:
        try:
            tree = ast.parse(code)
        except SyntaxError:
            continue  # compiled again per test, which reports it
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                if _is_stdlib(node.value.id):
                    names.add(node.value.id)
    return frozenset(names)


def _on_alarm(signum, frame):
    raise TestTimeout()


def judge(fd, result_fd, tests, test_time_s):
    """Run `tests` against the program behind `fd`; write one verdict line per test to `result_fd`."""
    link = Link(fd)
    signal.signal(signal.SIGALRM, _on_alarm)

    def verdict(index, ok, error=None):
        line = {"i": index, "ok": ok} if error is None else {"i": index, "ok": ok, "error": error}
        os.write(result_fd, (json.dumps(line) + "\n").encode())

    failure = None
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, test_time_s)
            ready = link.channel.receive()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        if not (isinstance(ready, dict) and ready.get("ready") is True):
            failure = "the program did not finish its top-level code"
    except TestTimeout:
        failure = "the program's top-level code timed out"
    except Exception:  # a broken socket, or bytes that are not a message
        failure = "the program did not start"
    namespace = _TestNamespace(link, _module_names(tests))
    for index, code in enumerate(tests):
        if failure is not None:
            verdict(index, False, failure)
            continue
        try:
            signal.setitimer(signal.ITIMER_REAL, test_time_s)
            exec(compile(code, f"<test {index}>", "exec"), namespace)
            signal.setitimer(signal.ITIMER_REAL, 0)
            verdict(index, not link.lost, "ProgramGone" if link.lost else None)
        except TestTimeout:
            failure = f"not run: test {index} timed out"
            verdict(index, False, "timeout")
        except BaseException as error:
            signal.setitimer(signal.ITIMER_REAL, 0)
            verdict(index, False, type(error).__name__)
        if link.lost:  # a test that swallowed the error does not pass, and the rest cannot
            failure = "not run: the program ended"
