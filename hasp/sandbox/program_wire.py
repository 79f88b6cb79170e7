"""Values between the test checker and the program under test: data by value, the rest by handle.

The two run in separate processes (``hasp.sandbox.program``), so what a program returns has to
cross a pipe. Only plain data crosses by value, rebuilt on the other side from the exact builtin
types: ``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``, ``bytes``, ``bytearray``,
``list``, ``tuple``, ``dict``, ``set``, ``frozenset``. A subclass of one of them is sent as its
base value, read through the base type's own methods, so an ``int`` subclass whose ``__eq__``
says yes to everything arrives as a plain ``int``. A module crosses by its name, a builtin type or function (``int``, ``len``) as itself. Anything else
(a function, a class, an instance of the program's own class) stays where it lives and crosses as
a numbered handle, which the holder answers operations on.

Each message is one JSON line. The reader of an untrusted line bounds its length and nesting and
accepts only the tags below; an unknown tag is a ``ValueError``.
"""

from __future__ import annotations

import builtins
import json
import traceback

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time: every program run pays for imports
    from collections.abc import Callable
    from typing import Any

#: a line longer than this (bytes) is refused
MAX_LINE = 16 * 1024 * 1024
MAX_DEPTH = 200
_SAFE_INT = 1 << 53
_BUILTIN_FUNCTION = type(len)


def type_name(v: object) -> str:
    """The real name of ``v``'s class (a metaclass cannot change what this reads)."""
    return str(type.__dict__["__name__"].__get__(type(v)))[:80]


def encode(v: Any, handle: Callable[[Any], int], depth: int = 0) -> Any:
    """``v`` as a JSON-ready tree; ``handle(obj)`` numbers an object that is not data (or raises
    ``TypeError`` where objects may not cross)."""
    if depth > MAX_DEPTH:
        raise ValueError("the value is nested too deeply to be sent")
    t = type(v)
    if v is None or t is bool:
        return v
    sub = depth + 1
    if issubclass(t, int) and t is not bool:
        i = int.__int__(v)
        return i if -_SAFE_INT < i < _SAFE_INT else {"i": format(i, "x")}
    if issubclass(t, float):
        return float.__float__(v)
    if issubclass(t, str):
        return str.__str__(v)
    if issubclass(t, complex):
        return {"c": [complex.real.__get__(v), complex.imag.__get__(v)]}
    if issubclass(t, bytes):
        return {"b": bytes.__getitem__(v, slice(None)).hex()}
    if issubclass(t, bytearray):
        return {"ba": bytes(bytearray.copy(v)).hex()}
    if issubclass(t, list):
        return [encode(x, handle, sub) for x in list.copy(v)]
    if issubclass(t, tuple):
        return {"t": [encode(x, handle, sub) for x in tuple.__getitem__(v, slice(None))]}
    if issubclass(t, dict):
        return {"d": [[encode(k, handle, sub), encode(x, handle, sub)] for k, x in list(dict.items(v))]}
    if issubclass(t, frozenset):
        return {"f": [encode(x, handle, sub) for x in frozenset.copy(v)]}
    if issubclass(t, set):
        return {"s": [encode(x, handle, sub) for x in set.copy(v)]}
    if t is type(json):
        name = v.__dict__.get("__name__")
        if type(name) is str:
            return {"m": name}
    if t is type or t is _BUILTIN_FUNCTION:
        name = type.__dict__["__name__"].__get__(v) if t is type else v.__name__
        if getattr(builtins, name, None) is v:
            return {"B": name}
    return {"h": handle(v), "r": type_name(v)}


def decode(x: Any, resolve: Callable[[int, str], Any], module: Callable[[str], Any], depth: int = 0) -> Any:
    """The value ``encode`` sent; ``resolve(number, type name)`` turns a handle into an object and
    ``module(name)`` a module name into a module (raises ``ValueError`` on anything unknown)."""
    if depth > MAX_DEPTH:
        raise ValueError("nested too deeply")
    if x is None or type(x) in (bool, int, float, str):
        return x
    sub = depth + 1
    if type(x) is list:
        return [decode(e, resolve, module, sub) for e in x]
    if type(x) is not dict or len(x) not in (1, 2):
        raise ValueError(f"not a value: {type(x).__name__}")
    (tag, val), *rest = x.items()
    if tag == "i" and type(val) is str and len(val) < 100_000:
        return int(val, 16)
    if tag == "c" and type(val) is list and len(val) == 2 and all(type(p) in (int, float) for p in val):
        return complex(val[0], val[1])
    if tag in ("b", "ba") and type(val) is str:
        return (bytes if tag == "b" else bytearray).fromhex(val)
    if tag in ("t", "s", "f") and type(val) is list:
        items = [decode(e, resolve, module, sub) for e in val]
        return {"t": tuple, "s": set, "f": frozenset}[tag](items)
    if tag == "d" and type(val) is list and all(type(p) is list and len(p) == 2 for p in val):
        return {decode(k, resolve, module, sub): decode(e, resolve, module, sub) for k, e in val}
    if tag == "m" and type(val) is str:
        return module(val)
    if tag == "B" and type(val) is str and type(getattr(builtins, val, None)) in (type, _BUILTIN_FUNCTION):
        return getattr(builtins, val)
    if tag == "h" and type(val) is int and rest and rest[0][0] == "r" and type(rest[0][1]) is str:
        return resolve(val, rest[0][1][:80])
    if tag == "h" and type(val) is int and not rest:
        return resolve(val, "")
    raise ValueError(f"unknown value tag {tag!r}")


def dumps(msg: dict) -> bytes:
    """One message as its line."""
    return (json.dumps(msg) + "\n").encode("ascii")


def loads(line: bytes) -> dict:
    """One message from a line that may come from the program (raises ``ValueError``)."""
    if len(line) > MAX_LINE or not line.endswith(b"\n"):
        raise ValueError("a message longer than the limit")
    try:
        msg = json.loads(line)
    except RecursionError as e:
        raise ValueError("a message nested too deeply") from e
    if type(msg) is not dict:
        raise ValueError("a message that is not an object")
    return msg


def where(tb: object, fname: str) -> str:
    """`` [<name> line N: source]`` of the last frame of ``tb`` in the file named ``fname`` (a
    pseudo-file such as ``<solution>``), or ``""``: the line a failure report points at."""
    frames = [f for f in traceback.extract_tb(tb) if f.filename == fname]  # type: ignore[arg-type]
    if not frames:
        return ""
    f = frames[-1]
    return f" [{fname[1:-1]} line {f.lineno}: {(f.line or '').strip()[:300]}]"


def message(e: BaseException) -> str:
    """``str(e)`` cut to 1,500 characters; ``<unprintable>`` when a hostile ``__str__`` raises."""
    try:
        return str(e)[:1500]
    except BaseException:  # noqa: BLE001 - a hostile __str__
        return "<unprintable>"
