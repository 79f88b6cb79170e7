"""Run an untrusted program and its tests in two locked-down child processes.

``run_program(solution, tests, entry_point, prefix=...)`` starts two children through
``hasp.sandbox.spawn``: the program's process (``hasp.sandbox.program_solution``), which defines
the program and answers calls into it, and the checker (``hasp.sandbox.program_driver``), which
runs the problem's own code and the tests against the program's globals over a pair of pipes
and alone writes the verdict, to a private fd, tagged with the run's nonce. The program's
process never holds the tests, the expected values, the nonce or that fd, and the checker never
runs the program's code; why this and not hooks inside one interpreter is in the checker's
docstring. Both get one random string-hash seed per run, so a set iterates alike on both sides.

Each child gets every layer of ``hasp.sandbox.lockdown``: a network namespace,
rlimits (address space ``memory_mb``; CPU seconds timeout + 1, so the kernel
stops a runaway even if the host is gone; FSIZE, NOFILE, CORE=0, NPROC=0), uid
``nobody`` when root (import roots kept through ``O_PATH`` handles), a
parent-death signal, no_new_privs, not dumpable, Landlock (reads of the standard
library, the interpreter's shared libraries and its temp dir, writes only beneath
its temp dir: ``hasp.sandbox.landlock.confine_program``) and a seccomp allow-list from
the same builder as the PF worker's (``hasp.sandbox.seccomp``: what an interpreter running
stdlib code needs; no fork/clone/exec, sockets, signals to others, ptrace, SysV IPC, mounts,
namespaces, chmod/chown/utime...; without Landlock no file writes at all). Every layer asked
for is required: one that cannot be installed is a refusal (status ``error``, one line)
unless ``allow_weaker``, the user's recorded opt-in. A kernel without Landlock therefore
refuses by default, and under the opt-in the program can read every world-readable file
(``weaker`` names the layer). The host gives each child its own session and temp dir; the
wall-clock timeout SIGKILLs both groups, which are killed after every run anyway, and the
dirs are removed.

Threads and subprocesses are not available to the program (NPROC=0, no clone).
A verdict only counts when it carries the run's nonce. ``timeout`` (wall clock)
and ``killed`` by a signal are decided here from the exit status; when the checker reports
that the program's process stopped, that process's exit status names why.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import secrets
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from typing import IO, Any, Literal

from hasp.sandbox import seccomp as _seccomp
from hasp.sandbox import spawn
from hasp.sandbox.lockdown import REFUSED_EXIT, REFUSED_PREFIX
from hasp.sandbox.worker import SandboxRefused

Status = Literal["passed", "failed", "timeout", "error", "killed"]
STATUSES: tuple[str, ...] = ("passed", "failed", "timeout", "error", "killed")
DRIVER = "hasp.sandbox.program_driver"
PROGRAM_DRIVER = "hasp.sandbox.program_solution"

MAX_DETAIL_CHARS = 2000
OUTPUT_TAIL_BYTES = 4000


@dataclass
class TestResult:
    """The verdict of one sandboxed test run."""

    __test__ = False  # not a pytest class

    passed: bool
    status: Status
    detail: str
    elapsed_s: float
    protections: dict[str, Any] = field(default_factory=dict)
    output: str = ""  # tail of what the program printed (stdout + stderr)

    def to_dict(self) -> dict[str, Any]:
        return {"passed": self.passed, "status": self.status, "detail": self.detail,
                "elapsed_s": round(self.elapsed_s, 4), "protections": self.protections,
                "output": self.output}


def _read_tail(f: IO[bytes], limit: int) -> str:
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(max(0, size - limit))
    return f.read().decode("utf-8", "replace")


def _signal_name(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _parse_verdict(raw: str, nonce: str) -> dict[str, Any] | None:
    for line in reversed(raw.splitlines()):
        if nonce in line:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if isinstance(msg, dict) and msg.get("nonce") == nonce and msg.get("status") in STATUSES:
                return msg
    return None


def _judge(verdict: dict[str, Any] | None, timed_out: bool, rc: int | None, timeout_s: float,
           elapsed: float, output: str) -> TestResult:
    if timed_out and verdict is None:
        return TestResult(False, "timeout", f"wall-clock timeout after {timeout_s:g}s; process group killed",
                          elapsed, output=output)
    if verdict is not None:
        status = verdict["status"]
        return TestResult(status == "passed", status, str(verdict.get("detail", ""))[:MAX_DETAIL_CHARS],
                          elapsed, protections=verdict.get("protections") or {}, output=output)
    if rc == REFUSED_EXIT:
        line = next((x for x in output.splitlines() if x.startswith(REFUSED_PREFIX)), "")
        if line:
            return TestResult(False, "error", line, elapsed, output=output)
    if rc is not None and rc < 0:
        sig = -rc
        why = {signal.SIGXCPU: "CPU time limit", signal.SIGKILL: "killed (CPU hard limit)",
               signal.SIGXFSZ: "file size limit", signal.SIGSYS: "forbidden system call",
               signal.SIGSEGV: "crashed (segmentation fault; deep recursion?)"}.get(sig, "crashed")
        return TestResult(False, "killed", f"{why}: {_signal_name(sig)}", elapsed, output=output)
    tail = output.strip()[-500:]
    return TestResult(False, "error", f"the process exited (code {rc}) before the tests finished"
                      + (f"; output tail:\n{tail}" if tail else ""), elapsed, output=output)


def _start(driver: str, workdir: str, python: str | None, out: IO[bytes], fds: tuple[int, ...], seed: int
           ) -> subprocess.Popen[bytes]:
    return spawn.start(driver, workdir, python=python, stdout=out, stderr=subprocess.STDOUT, pass_fds=fds,
                       hash_seed=seed)


def _stop(proc: subprocess.Popen[bytes] | None) -> int | None:
    if proc is None:
        return None
    with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        if proc.stdin is not None:
            proc.stdin.close()
    try:
        return proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - unkillable?
        return None


def _program_stopped(r: TestResult, rc: int | None) -> TestResult:
    """A checker verdict that the program's process stopped, told by that process's exit status."""
    if rc is not None and rc != 0:
        why = _judge(None, False, rc, 0, r.elapsed_s, r.output)
        return TestResult(False, why.status, why.detail, r.elapsed_s, r.protections, r.output)
    return TestResult(False, "error", "the process exited (code 0) before the tests finished", r.elapsed_s,
                      r.protections, r.output)


def run_program(solution_code: str, tests: str, entry_point: str = "", *, prefix: str = "",
                timeout_s: float = 10.0, memory_mb: int = 512, fsize_mb: int = 16, nofile: int = 64,
                netns: bool = True, landlock: bool = True, seccomp: bool = True, setuid: bool = True,
                python: str | None = None, allow_weaker: bool = False, _probe: bool = False) -> TestResult:
    """Execute ``solution_code`` in one sandboxed process and ``prefix`` (the problem's own code,
    trusted) then ``tests`` in another, the tests seeing the program's globals as the checker's
    driver describes (``hasp.sandbox.program_driver``).

    ``entry_point`` (optional) must be defined by the solution. The switches turn
    single layers off (for tests that show the other layers hold); keep the defaults.
    A layer that is switched on but cannot be installed is a refusal (status ``error``,
    the detail one line naming it) unless ``allow_weaker``; the result's protections
    then list the missing layers under ``weaker``."""
    t0 = time.perf_counter()
    nonce = secrets.token_hex(16)
    cpu_s = max(1, math.ceil(timeout_s) + 1)
    timed_out = False
    rc = prog_rc = None
    procs: dict[str, subprocess.Popen[bytes] | None] = {"checker": None, "program": None}
    dirs = {k: spawn.make_workdir("hasp_code_", setuid=setuid) for k in procs}
    pipes: list[int] = []
    try:
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as res:
            req_r, req_w = os.pipe()
            ans_r, ans_w = os.pipe()
            pipes += [req_r, req_w, ans_r, ans_w]
            jobs = {"checker": {"tests": tests, "prefix": prefix, "entry_point": entry_point, "nonce": nonce,
                                "result_fd": res.fileno(), "requests_fd": req_w, "answers_fd": ans_r,
                                "probe": _probe},
                    "program": {"solution": solution_code, "requests_fd": req_r, "answers_fd": ans_w,
                                "probe": _probe}}
            fds = {"checker": (res.fileno(), req_w, ans_r), "program": (req_r, ans_w)}
            try:
                seed = secrets.randbelow(2**32)  # one set order for both sides, a new one every run
                for k, driver in (("program", PROGRAM_DRIVER), ("checker", DRIVER)):
                    procs[k] = _start(driver, dirs[k], python, out, fds[k], seed)
            except OSError as e:
                return TestResult(False, "error", f"cannot start the sandbox: {e}", time.perf_counter() - t0)
            finally:
                for fd in pipes:  # only the children hold the channel, so either end sees the other stop
                    os.close(fd)
                pipes.clear()
            for k in ("program", "checker"):
                spec = spawn.lockdown_spec(
                    dirs[k], memory_mb=memory_mb, cpu_s=(cpu_s, cpu_s + 1), fsize_bytes=fsize_mb * 1024 * 1024,
                    nofile=nofile, netns=netns, setuid=setuid, landlock="program" if landlock else False,
                    pdeathsig=True, import_roots_via_fd=True,
                    seccomp_profile=_seccomp.PROGRAM_STRICT_PROFILE if seccomp else None,
                    seccomp_with_landlock=_seccomp.PROGRAM_PROFILE if seccomp else None,
                    allow_weaker=allow_weaker)
                proc = procs[k]
                assert proc is not None
                try:
                    if k == "program":
                        assert proc.stdin is not None
                        proc.stdin.write(spawn.first_line(spec, jobs[k]))
                        proc.stdin.close()
                    else:
                        proc.communicate(spawn.first_line(spec, jobs[k]),
                                         timeout=max(0.1, timeout_s - (time.perf_counter() - t0)))
                except subprocess.TimeoutExpired:
                    timed_out = True
                except (BrokenPipeError, OSError):
                    pass  # died before reading its job; rc tells why
            rc, prog_rc = _stop(procs["checker"]), _stop(procs["program"])
            procs = {}
            elapsed = time.perf_counter() - t0
            output = _read_tail(out, OUTPUT_TAIL_BYTES)
            verdict = _parse_verdict(_read_tail(res, 64 * 1024), nonce)
    finally:
        for proc in procs.values():
            _stop(proc)
        for fd in pipes:
            os.close(fd)
        for d in dirs.values():
            spawn.remove_workdir(d)
    if verdict is None and rc == REFUSED_EXIT or verdict is not None and verdict.get("program_gone") \
            and prog_rc == REFUSED_EXIT:
        rc = REFUSED_EXIT
        verdict = None
    r = _judge(verdict, timed_out, rc, timeout_s, elapsed, output)
    if verdict is not None and verdict.get("program_gone"):
        r = _program_stopped(r, prog_rc)
    return r


def probe_protections(**kw: Any) -> dict[str, Any]:
    """The protections a sandboxed run actually gets on this machine (one empty run)."""
    return run_program("", "", _probe=True, **kw).protections


def require_layers(**kw: Any) -> list[str]:
    """Check once, with an empty run, that programs may run here: raises ``SandboxRefused``
    (the child's one refusal line) when a required layer is missing and ``allow_weaker`` is
    off; else returns the missing layers the weaker mode will record (empty when none).

    A refusal seen while grading a program could be imitated by the program itself (it
    controls its output and exit status), so a grader decides up front, before any
    untrusted code runs, and a program that prints a refusal merely fails."""
    r = run_program("", "", _probe=True, **kw)
    if r.status == "error" and r.detail.startswith(REFUSED_PREFIX):
        raise SandboxRefused(r.detail)
    return [str(w) for w in r.protections.get("weaker") or ()]
