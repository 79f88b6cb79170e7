"""Child-side driver: run an untrusted program, then its tests, and report a verdict.

Started through ``hasp.sandbox.child`` by ``hasp.sandbox.program.run_program``.
The job carries the solution, the tests, an optional entry point, a per-run
nonce and the number of a private file descriptor. The verdict
(``{"nonce", "status", "detail", "protections"}``) is written to that fd and
the process ends with ``os._exit(0)``; a process that exits without a report
tagged with the nonce never counts as passed, whatever it printed.

Statuses: ``passed``; ``failed`` (an assertion or an exception while the tests
ran); ``error`` (syntax error, the solution raised while being defined, the
entry point is missing); ``killed`` (MemoryError under the address-space cap,
the file size limit). Timeouts and signals are judged by the host.
"""

from __future__ import annotations

import builtins
import json
import linecache
import os
import sys
import traceback

TYPE_CHECKING = False
if TYPE_CHECKING:  # typing is not imported at run time: every program run pays for imports
    from collections.abc import Callable
    from typing import Any, NoReturn

_EFBIG = 27  # RLIMIT_FSIZE (Python ignores SIGXFSZ, the write fails instead)


def _where(tb: Any, fname: str) -> str:
    frames = [f for f in traceback.extract_tb(tb) if f.filename == fname]
    if not frames:
        return ""
    f = frames[-1]
    return f" [{fname[1:-1]} line {f.lineno}: {(f.line or '').strip()[:300]}]"


def _exc_text(e: BaseException) -> str:
    try:
        msg = str(e)
    except BaseException:  # noqa: BLE001 - a hostile __str__
        msg = "<unprintable>"
    return f"{type(e).__name__}: {msg[:1500]}" if msg else type(e).__name__


class _Reporter:
    """Writes the one verdict and ends the process (bound before the program runs, so the
    program cannot swap ``os.write`` / ``json.dumps`` / ``os._exit`` underneath it)."""

    def __init__(self, fd: int, nonce: str) -> None:
        self.fd, self.nonce = fd, nonce
        self.write, self.dumps, self.exit_now = os.write, json.dumps, os._exit
        self.prot: dict = {}

    def __call__(self, status: str, detail: object) -> NoReturn:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: BLE001, S110
                pass
        msg = self.dumps({"nonce": self.nonce, "status": status, "detail": str(detail)[:4000],
                          "protections": self.prot})
        data = ("\n" + msg + "\n").encode("utf-8", "replace")
        while data:
            data = data[self.write(self.fd, data):]
        self.exit_now(0)


def _run(job: dict, report: _Reporter) -> NoReturn:
    entry = job["entry_point"]
    g = {"__name__": "__solution__", "__builtins__": builtins}
    for fname, src in (("<solution>", job["solution"]), ("<tests>", job["tests"])):
        linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
    try:
        code = compile(job["solution"], "<solution>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        line = (f" (line {e.lineno}: {(e.text or '').strip()[:200]})"
                if isinstance(e, SyntaxError) and e.lineno else "")
        report("error", f"{type(e).__name__}: {getattr(e, 'msg', e)}{line}")
    try:
        tests = compile(job["tests"], "<tests>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        report("error", f"the tests do not compile: {type(e).__name__}: {e}")
    try:
        exec(code, g)  # noqa: S102 - this is the sandbox
    except MemoryError:
        report("killed", "memory limit: MemoryError while defining the solution")
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, OSError) and e.errno == _EFBIG:
            report("killed", "file size limit: " + _exc_text(e))
        report("error", "the solution raised while being defined: " + _exc_text(e)
               + _where(e.__traceback__, "<solution>"))
    if entry and entry not in g:
        defined = sorted(k for k, v in g.items() if callable(v) and not k.startswith("__"))[:10]
        report("error", f"the solution does not define {entry!r} (defines: {', '.join(defined) or 'nothing callable'})")
    try:
        exec(tests, g)  # noqa: S102
    except MemoryError:
        report("killed", "memory limit: MemoryError while the tests ran")
    except AssertionError as e:
        try:
            msg = str(e)
        except BaseException:  # noqa: BLE001
            msg = ""
        report("failed", f"assertion failed: {msg[:1500]}" if msg
               else "assertion failed" + _where(e.__traceback__, "<tests>"))
    except BaseException as e:  # noqa: BLE001
        tb = e.__traceback__
        if isinstance(e, OSError) and e.errno == _EFBIG:
            report("killed", "file size limit: " + _exc_text(e))
        report("failed", _exc_text(e) + _where(tb, "<solution>") + _where(tb, "<tests>"))
    report("passed", "all tests passed")


def prepare(job: dict) -> Callable[[dict], int]:
    """Detach stdin and bind the reporter; the returned runner executes the program."""
    fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(fd, 0)
    os.close(fd)
    report = _Reporter(job["result_fd"], job["nonce"])

    def run(protections: dict) -> int:
        if not protections.get("errors"):
            protections.pop("errors", None)
        report.prot = protections
        if job.get("probe"):
            report("passed", "probe")
        _run(job, report)

    return run
