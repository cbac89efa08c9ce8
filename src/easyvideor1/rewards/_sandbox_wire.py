"""Wire format between the judge and the program's process (imported inside the sandbox only).

Newline-delimited JSON messages; values are plain data tagged where JSON alone would lose the type
(tuples, sets, bytes, huge ints, namedtuples, ...). Decoding never executes anything: a message from
the program can only ever become numbers, strings, containers and opaque handles.
"""

import json
import socket
import sys

MAX_DEPTH = 100
MAX_MESSAGE_BYTES = 16 << 20


def to_wire(value, other, depth=0):
    """Encode plain data; `other(value)` encodes everything else (a handle) or raises TypeError."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if value is None or value is True or value is False or type(value) is str:
        return value
    nested = depth + 1
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        number = int(value)  # JSON integers are exact; hex past int-to-str's digit limit
        return number if number.bit_length() < 10000 else {"i": format(number, "x")}
    if isinstance(value, float):
        return float(value)  # Python's JSON round-trips floats exactly (NaN and infinities too)
    if isinstance(value, complex):
        return {"c": [float(value.real).hex(), float(value.imag).hex()]}
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return {"ba" if isinstance(value, bytearray) else "b": bytes(value).hex()}
    if isinstance(value, list):
        return [to_wire(item, other, nested) for item in value]
    if isinstance(value, tuple):
        items = [to_wire(item, other, nested) for item in value]
        fields = getattr(type(value), "_fields", None)
        if isinstance(fields, tuple) and len(fields) == len(value) and all(type(f) is str for f in fields):
            return {"nt": [str(type(value).__name__), list(fields), items]}  # a namedtuple
        return {"t": items}
    if isinstance(value, dict):
        return {"d": [[to_wire(k, other, nested), to_wire(v, other, nested)] for k, v in value.items()]}
    if isinstance(value, (set, frozenset)):
        items = [to_wire(item, other, nested) for item in value]
        return {"fs" if isinstance(value, frozenset) else "s": items}
    collections = sys.modules.get("collections")
    if collections is not None and isinstance(value, collections.deque):
        return {"dq": [to_wire(item, other, nested) for item in value]}
    if isinstance(value, range):
        return {"r": [to_wire(value.start, other), to_wire(value.stop, other), to_wire(value.step, other)]}
    fractions, decimal = sys.modules.get("fractions"), sys.modules.get("decimal")
    if fractions is not None and isinstance(value, fractions.Fraction):
        return {"q": [format(value.numerator, "x"), format(value.denominator, "x")]}
    if decimal is not None and isinstance(value, decimal.Decimal):
        return {"dec": str(value)}
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        return to_wire(value.item(), other, nested)  # numpy scalars compare like Python numbers
    return other(value)


def from_wire(data, handle, depth=0):
    """Decode `to_wire` output into plain Python values; `handle(id)` makes the object of a handle."""
    if depth > MAX_DEPTH:
        raise ValueError("value nested too deeply")
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    nested = depth + 1
    if isinstance(data, list):
        return [from_wire(item, handle, nested) for item in data]
    if not (isinstance(data, dict) and len(data) == 1):
        raise ValueError("malformed value")
    ((tag, body),) = data.items()
    if tag == "i":
        return int(body, 16)
    if tag == "f":
        return float.fromhex(body)
    if tag == "c":
        return complex(float.fromhex(body[0]), float.fromhex(body[1]))
    if tag in ("b", "ba"):
        return (bytes if tag == "b" else bytearray).fromhex(body)
    if tag in ("t", "s", "fs"):
        items = [from_wire(item, handle, nested) for item in body]
        return {"t": tuple, "s": set, "fs": frozenset}[tag](items)
    if tag == "d":
        return {from_wire(k, handle, nested): from_wire(v, handle, nested) for k, v in body}
    if tag == "r":
        return range(*(from_wire(part, handle, nested) for part in body))
    if tag == "nt":
        import collections

        name, fields, items = body
        kind = collections.namedtuple(str(name), [str(field) for field in fields], rename=True)
        return kind(*(from_wire(item, handle, nested) for item in items))
    if tag == "dq":
        import collections

        return collections.deque(from_wire(item, handle, nested) for item in body)
    if tag == "q":
        import fractions

        return fractions.Fraction(int(body[0], 16), int(body[1], 16))
    if tag == "dec":
        import decimal

        return decimal.Decimal(str(body))
    if tag == "h" and isinstance(body, int):
        return handle(body)
    raise ValueError("malformed value")


class MessageTooLong(ValueError):
    """A message exceeded `MAX_MESSAGE_BYTES`: the stream cannot be followed any further."""


class Channel:
    """Newline-delimited JSON messages over a stream socket, with a bound on a message's size."""

    def __init__(self, fd):
        self._socket = socket.socket(fileno=fd)
        self._buffer = b""

    def send(self, message):
        self._socket.sendall(json.dumps(message, separators=(",", ":")).encode() + b"\n")

    def receive(self):
        """The next message, or None at end of stream; ValueError when it is too long or not JSON."""
        while b"\n" not in self._buffer:
            if len(self._buffer) > MAX_MESSAGE_BYTES:
                raise MessageTooLong("message too long")
            chunk = self._socket.recv(1 << 20)
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)
