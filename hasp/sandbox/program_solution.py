"""Program side: define the untrusted program, then answer the checker's calls into it.

Started through ``hasp.sandbox.child`` by ``hasp.sandbox.program.run_program``, next to the
checker (``hasp.sandbox.program_driver``), with the same lockdown. The job carries the program
and two pipe ends: requests come in on one, answers go out on the other. The process holds no
test, no expected output, no nonce and no verdict channel, so nothing it does to itself (frames,
``gc``, patched builtins or modules, printed lines, an early exit) reaches the verdict; what it
sends is only ever taken as its own answer.

Messages (one JSON line each, values as ``hasp.sandbox.program_wire`` encodes them): first
``{"ready", "protections"}`` (written before any untrusted code runs), then the outcome of
defining the program: ``{"defined": [names]}`` or ``{"status": "error"|"killed", "detail"}``;
then one answer per request, ``{"v": value}`` or ``{"raise": type, "msg", "where", "errno"}``.
"""

from __future__ import annotations

import builtins
import linecache
import os
import sys

from hasp.sandbox import program_wire as wire

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, NoReturn

_EFBIG = 27  # RLIMIT_FSIZE (Python ignores SIGXFSZ, the write fails instead)
_SRC = "<solution>"


def _where(tb: Any) -> str:
    return wire.where(tb, _SRC)


_text = wire.message


def _builtin_base(e: BaseException) -> str:
    """The nearest builtin exception class of ``e`` (what the checker can rebuild)."""
    for c in type(e).__mro__:
        name = type.__dict__["__name__"].__get__(c)
        if getattr(builtins, name, None) is c:
            return name
    return "Exception"


class _Server:
    def __init__(self, job: dict) -> None:
        self.rfile = os.fdopen(job["requests_fd"], "rb")
        self.wfd = job["answers_fd"]
        self.objs: list[Any] = []
        self.g: dict[str, Any] = {"__name__": "__solution__", "__builtins__": builtins}
        self.ops: dict[str, Callable[..., Any]] = {
            "call": lambda o, *a, **k: o(*a, **k), "getattr": getattr, "setattr": setattr, "iter": iter, "next": next,
            "len": len, "bool": bool, "getitem": lambda o, k: o[k], "contains": lambda o, x: x in o,
            "eq": lambda o, x: o == x}

    def send(self, msg: dict) -> None:
        for stream in (sys.stdout, sys.stderr):  # what the program printed reaches the output tail
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001, S110
                pass
        data = wire.dumps(msg)
        while data:
            data = data[os.write(self.wfd, data):]

    def handle(self, obj: Any) -> int:
        self.objs.append(obj)
        return len(self.objs) - 1

    def resolve(self, n: int, _name: str) -> Any:
        return self.objs[n]

    def value(self, v: Any) -> dict:
        try:
            return {"v": wire.encode(v, self.handle)}
        except RecursionError:
            return {"raise": "RecursionError", "msg": "the value is nested too deeply to be sent"}
        except BaseException as e:  # noqa: BLE001 - a hostile value
            return {"raise": "TypeError", "msg": f"the value cannot be sent: {_text(e)}"}

    def define(self, src: str) -> NoReturn | None:
        linecache.cache[_SRC] = (len(src), None, src.splitlines(True), _SRC)
        try:
            code = compile(src, _SRC, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as e:
            line = (f" (line {e.lineno}: {(e.text or '').strip()[:200]})"
                    if isinstance(e, SyntaxError) and e.lineno else "")
            self.finish("error", f"{type(e).__name__}: {getattr(e, 'msg', e)}{line}")
        try:
            exec(code, self.g)  # noqa: S102 - this is the sandbox
        except MemoryError:
            self.finish("killed", "memory limit: MemoryError while defining the solution")
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, OSError) and e.errno == _EFBIG:
                self.finish("killed", f"file size limit: {type(e).__name__}: {_text(e)}")
            self.finish("error", f"the solution raised while being defined: {type(e).__name__}: {_text(e)}"
                        + _where(e.__traceback__))
        return None

    def finish(self, status: str, detail: str) -> NoReturn:
        self.send({"status": status, "detail": detail})
        os._exit(0)

    def answer(self, req: dict) -> dict:
        op = req.get("op")
        if op == "get":
            names = [n for n in req.get("names") or () if isinstance(n, str) and n in self.g]
            return {"v": {n: self.value(self.g[n]) for n in names}}
        fn = self.ops.get(op) if isinstance(op, str) else None
        if fn is None:
            return {"raise": "TypeError", "msg": f"unknown operation {op!r}"}
        try:
            args = [wire.decode(a, self.resolve, __import__) for a in req.get("a") or ()]
            kw = wire.decode(req.get("k") or {"d": []}, self.resolve, __import__) if op == "call" else {}
            result = fn(self.objs[req["h"]], *args, **kw)
        except BaseException as e:  # noqa: BLE001 - whatever the program raises is its answer
            msg = {"raise": _builtin_base(e), "msg": _text(e), "where": _where(e.__traceback__)}
            if isinstance(e, OSError) and isinstance(e.errno, int):
                msg["errno"] = e.errno
            if not isinstance(e, Exception):
                msg["msg"] = f"{type(e).__name__}: {msg['msg']}"
            return msg
        return self.value(result)

    def serve(self) -> NoReturn:
        while True:
            line = self.rfile.readline()
            if not line:
                os._exit(0)
            try:
                reply = self.answer(wire.loads(line))
            except MemoryError:
                reply = {"raise": "MemoryError", "msg": ""}
            self.send(reply)


def prepare(job: dict) -> Callable[[dict], int]:
    """Detach stdin and open the channel; the returned runner defines the program and serves."""
    fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(fd, 0)
    os.close(fd)
    server = _Server(job)
    src = job["solution"]
    del job["solution"]

    def run(protections: dict) -> int:
        if not protections.get("errors"):
            protections.pop("errors", None)
        server.send({"ready": True, "protections": protections})
        if job.get("probe"):
            server.rfile.read()
            os._exit(0)
        server.define(src)
        server.send({"defined": sorted(k for k in server.g if isinstance(k, str))[:10000],
                     "callables": sorted(k for k, v in server.g.items()
                                         if isinstance(k, str) and callable(v) and not k.startswith("__"))[:10]})
        server.serve()

    return run
