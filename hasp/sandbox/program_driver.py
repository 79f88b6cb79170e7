"""Checker side: run the tests against a program that lives in another process, and report the verdict.

Started through ``hasp.sandbox.child`` by ``hasp.sandbox.program.run_program``, with the same
lockdown as the program's process (``hasp.sandbox.program_solution``). The job carries the tests,
the problem's own code (``prefix``: HumanEval's prompt, trusted like the tests), the entry point, a
per-run nonce, the private verdict fd and the two pipe ends to the program. The verdict
(``{"nonce", "status", "detail", "protections"}``) is written to that fd and the process ends
with ``os._exit(0)``.

Why a second process rather than hooks in one interpreter: in one interpreter the program can
reach whatever the checker holds (frames from ``sys._getframe``, a traceback's ``tb_frame``, a
generator's ``gi_frame``, ``gc``, ``ctypes``), replace what the tests call (builtins, modules,
the problem's helper functions) or return an object that equals anything. Audit hooks can close
some of those doors but not the last three, and every new introspection path reopens the first.
Here the program's process never holds the tests, the expected values, the nonce or the verdict
fd, and the checker never runs a line of the program's code:

* every global the tests read that the program defines is bound to what the program's process
  sends: plain data by value (exact builtin types, so no always-equal object) or a handle whose
  calls, attribute reads and writes, and iteration are requests to the program (``hasp.sandbox.program_wire``);
* names of builtins and names the problem's own code defines (``poly`` for HumanEval/32) are never
  taken from the program; a module the program imported is imported here from the standard library;
* whatever the program raises comes back as a builtin exception of the same kind;
* a program that ends, is killed, or sends an unreadable line is a program that stopped
  (``program_gone`` in the verdict; the host names the exit status), never a pass.

Statuses: ``passed``; ``failed`` (an assertion or an exception while the tests ran); ``error``
(syntax error, the solution raised while being defined, the entry point is missing, the program
stopped); ``killed`` (MemoryError under the address-space cap, the file size limit). Timeouts and
signals are judged by the host. A test that relies on the program mutating an argument in place
cannot see it (arguments cross by value).
"""

from __future__ import annotations

import ast
import builtins
import json
import linecache
import os
import sys

from hasp.sandbox import program_wire as wire

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time: every program run pays for imports
    from collections.abc import Callable
    from typing import Any, NoReturn

_EFBIG = 27  # RLIMIT_FSIZE (Python ignores SIGXFSZ, the write fails instead)
_CODE = type(compile("", "", "exec"))


class ProgramGone(BaseException):
    """The program's process stopped answering (a BaseException: tests catching Exception go on
    without swallowing it)."""


class ProgramError(Exception):
    """An exception of the program's that has no builtin counterpart."""


_where = wire.where


def _exc_text(e: BaseException) -> str:
    msg = wire.message(e)
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


class _Reporter:
    """Writes the one verdict and ends the process (bound before the tests run)."""

    def __init__(self, fd: int, nonce: str) -> None:
        self.fd, self.nonce = fd, nonce
        self.write, self.dumps, self.exit_now = os.write, json.dumps, os._exit
        self.prot: dict = {}

    def __call__(self, status: str, detail: object, **extra: Any) -> NoReturn:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001, S110
                pass
        msg = self.dumps({"nonce": self.nonce, "status": status, "detail": str(detail)[:4000],
                          "protections": self.prot, **extra})
        data = ("\n" + msg + "\n").encode("utf-8", "replace")
        while data:
            data = data[self.write(self.fd, data):]
        self.exit_now(0)


class _Program:
    """The pipe to the program's process; ``ask`` is one request and its answer."""

    def __init__(self, rfd: int, wfd: int) -> None:
        self.rfile, self.wfd = os.fdopen(rfd, "rb"), wfd
        self.gone = ""

    def recv(self) -> dict:
        if self.gone:
            raise ProgramGone(self.gone)
        try:
            line = self.rfile.readline(wire.MAX_LINE + 1)
        except OSError as e:
            line, self.gone = b"", f"the channel failed: {e}"
        if not line:
            self.gone = self.gone or "it exited or was killed"
            raise ProgramGone(self.gone)
        try:
            return wire.loads(line)
        except ValueError as e:
            self.gone = f"it sent an unreadable message ({e})"
            raise ProgramGone(self.gone) from None

    def ask(self, msg: dict) -> dict:
        if self.gone:
            raise ProgramGone(self.gone)
        data = wire.dumps(msg)
        try:
            while data:
                data = data[os.write(self.wfd, data):]
        except OSError as e:
            self.gone = f"it stopped reading ({e.strerror})"
            raise ProgramGone(self.gone) from None
        return self.recv()


_PROGRAM: _Program | None = None


def _rebuild(reply: dict) -> BaseException:
    """The exception the program raised, as the builtin of its kind."""
    name, msg = reply.get("raise"), str(reply.get("msg", ""))[:1500]
    cls = getattr(builtins, name, None) if isinstance(name, str) and name.isidentifier() else None
    if not (isinstance(cls, type) and issubclass(cls, Exception)):
        cls, msg = ProgramError, f"{name}: {msg}"
    try:
        errno = reply.get("errno")
        e = cls(errno, msg) if issubclass(cls, OSError) and type(errno) is int else cls(msg)
    except Exception:  # noqa: BLE001 - a constructor with other arguments (UnicodeDecodeError...)
        e = ProgramError(f"{name}: {msg}")
    e.hasp_where = str(reply.get("where", ""))[:400]
    return e


def _value(reply: Any) -> Any:
    if not isinstance(reply, dict):
        raise ProgramGone("it sent an unreadable answer")
    if "v" in reply:
        try:
            return wire.decode(reply["v"], _Handle, _module)
        except (ValueError, TypeError, RecursionError, OverflowError, MemoryError) as e:
            raise TypeError(f"the program's answer is not a value: {e}") from None
    raise _rebuild(reply)


#: the modules a program's answer may name: what the problem's own tests and code import (``_run``
#: sets it before the first answer crosses); a solution cannot make the checker import anything else
_ALLOWED_MODULES: frozenset[str] = frozenset()


def imported_modules(*sources: str) -> frozenset[str]:
    """Every module (and its parents) an ``import`` of ``sources`` names; a source that does not parse names none."""
    out: set[str] = set()
    for src in sources:
        try:
            tree = ast.parse(src)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            continue
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            for n in names:
                parts = n.split(".")
                out.update(".".join(parts[:i]) for i in range(1, len(parts) + 1))
    return frozenset(out)


def _module(name: str) -> Any:
    """A module the program's answer names, imported here: only one the problem's own tests or code
    import (``_ALLOWED_MODULES``), and only from the standard library."""
    if name not in _ALLOWED_MODULES:
        raise ValueError(f"module {name[:80]!r} is not one the problem's tests import")
    if name.split(".")[0] not in sys.stdlib_module_names:
        raise ValueError(f"module {name[:80]!r} is not in the standard library")
    __import__(name)
    return sys.modules[name]


def _send(v: Any) -> Any:
    def handle(obj: Any) -> int:
        if isinstance(obj, _Handle):
            return obj._n
        raise TypeError(f"a {wire.type_name(obj)} cannot be passed to the program")
    return wire.encode(v, handle)


class _Handle:
    """An object that lives in the program's process; operations on it are requests."""

    def __init__(self, n: int, kind: str) -> None:
        object.__setattr__(self, "_n", n)
        object.__setattr__(self, "_kind", kind)

    def _ask(self, op: str, *args: Any, **extra: Any) -> Any:
        assert _PROGRAM is not None
        return _value(_PROGRAM.ask({"op": op, "h": self._n, "a": [_send(a) for a in args], **extra}))

    def __call__(self, *args: Any, **kw: Any) -> Any:
        return self._ask("call", *args, k=_send(kw))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._ask("getattr", name)

    def __setattr__(self, name: str, value: Any) -> None:
        self._ask("setattr", name, value)

    def __iter__(self) -> Any:
        return self._ask("iter")

    def __next__(self) -> Any:
        return self._ask("next")

    def __len__(self) -> int:
        return self._ask("len")

    def __bool__(self) -> bool:
        return self._ask("bool")

    def __getitem__(self, key: Any) -> Any:
        return self._ask("getitem", key)

    def __contains__(self, x: Any) -> bool:
        return bool(self._ask("contains", x))

    def __eq__(self, other: object) -> bool:
        # two of the program's own objects are compared by the program; against data, never equal
        if not isinstance(other, _Handle):
            return False
        return self._n == other._n or self._ask("eq", other) is True

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(("program object", self._n))

    def __copy__(self) -> _Handle:
        return self

    def __deepcopy__(self, _memo: Any) -> _Handle:
        return self

    def __repr__(self) -> str:
        return f"<{self._kind} object of the program>"


def _names(code: Any) -> set[str]:
    out = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, _CODE):
            out |= _names(c)
    return out


def _failure(e: BaseException) -> tuple[str, str]:
    if isinstance(e, MemoryError):
        return "killed", "memory limit: MemoryError while the tests ran"
    if isinstance(e, OSError) and e.errno == _EFBIG:
        return "killed", "file size limit: " + _exc_text(e)
    remote = getattr(e, "hasp_where", "")
    if isinstance(e, AssertionError):
        try:
            msg = str(e)
        except BaseException:  # noqa: BLE001
            msg = ""
        return "failed", (f"assertion failed: {msg[:1500]}" if msg
                          else "assertion failed" + remote + _where(e.__traceback__, "<tests>"))
    return "failed", _exc_text(e) + remote + _where(e.__traceback__, "<tests>")


def _compile_prefix(src: str) -> Any:
    """The problem's own code; a prompt that ends in a bare ``def`` line gets a body, and one that
    does not compile at all gives no helpers (the tests then see the program's)."""
    for text in (src, src.rstrip() + "\n    ...\n"):
        try:
            return compile(text, "<prefix>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            pass
    return compile("", "<prefix>", "exec")


def _run(job: dict, report: _Reporter, program: _Program) -> NoReturn:
    global _ALLOWED_MODULES
    _ALLOWED_MODULES = imported_modules(job["tests"], job["prefix"])
    entry = job["entry_point"]
    for fname, src in (("<tests>", job["tests"]), ("<prefix>", job["prefix"])):
        linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
    try:
        tests = compile(job["tests"], "<tests>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        report("error", f"the tests do not compile: {type(e).__name__}: {e}")
    prefix = _compile_prefix(job["prefix"])
    gone = lambda: report("error", f"the program stopped before the tests finished: {program.gone}",  # noqa: E731
                          program_gone=True)
    try:
        defined = program.recv()
    except ProgramGone:
        gone()
    if defined.get("status") in ("error", "killed"):
        report(defined["status"], str(defined.get("detail", ""))[:4000])
    names = {n for n in defined.get("defined") or () if isinstance(n, str)}
    if entry and entry not in names:
        shown = [str(n)[:80] for n in defined.get("callables") or ()][:10]
        report("error", f"the solution does not define {entry!r} (defines: {', '.join(shown) or 'nothing callable'})")
    g: dict[str, Any] = {"__name__": "__solution__", "__builtins__": builtins}
    try:
        exec(prefix, g)  # noqa: S102 - the problem's own code, trusted like the tests
    except BaseException as e:  # noqa: BLE001
        report("error", "the problem's own code does not run: " + _exc_text(e))
    own = set(g) - {entry}
    wanted = sorted(n for n in (_names(tests) & names) - own if n == entry or not hasattr(builtins, n))
    try:
        answers = program.ask({"op": "get", "names": wanted}).get("v")
        for n in wanted:
            if isinstance(answers, dict) and n in answers:
                try:
                    g[n] = _value(answers[n])
                except Exception:  # noqa: BLE001, S110
                    pass  # a global that cannot cross (or fails to) stays undefined for the tests
    except ProgramGone:
        gone()
    try:
        exec(tests, g)  # noqa: S102
    except ProgramGone:
        gone()
    except BaseException as e:  # noqa: BLE001
        if program.gone:
            gone()
        report(*_failure(e))
    if program.gone:
        gone()
    report("passed", "all tests passed")


def _merge(own: dict, program: dict) -> dict:
    """The protections to report: the program's process (where untrusted code ran), with every
    layer missing in either process under ``weaker``."""
    prot = dict(program) if isinstance(program, dict) else {}
    weaker = [str(w) for w in prot.get("weaker") or ()] + [f"checker: {w}" for w in own.get("weaker") or ()]
    if weaker:
        prot["weaker"] = weaker
    prot["verdict"] = "separate process"
    return prot


def prepare(job: dict) -> Callable[[dict], int]:
    """Detach stdin, bind the reporter and open the program's channel; the returned runner waits for
    the program, runs the tests and reports."""
    global _PROGRAM
    fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(fd, 0)
    os.close(fd)
    report = _Reporter(job["result_fd"], job["nonce"])
    program = _PROGRAM = _Program(job["answers_fd"], job["requests_fd"])

    def run(protections: dict) -> int:
        try:
            ready = program.recv()
        except ProgramGone:
            report("error", f"the program stopped before the tests started: {program.gone}", program_gone=True)
        report.prot = _merge(protections, ready.get("protections"))
        if job.get("probe"):
            report("passed", "probe")
        _run(job, report, program)

    return run
