"""Host side of a long-lived sandboxed child that answers JSON-lines requests.

A ``Worker`` owns one child (started through ``hasp.sandbox.spawn``) and its
private directory. Every read and write has a deadline; a child that overruns
it is killed with its whole process group (``SandboxTimeout``), and one that
dies or speaks garbage becomes a ``SandboxError`` carrying its exit status and
the tail of its stderr. The object is owned by a finalizer rather than by its
user, so the child goes away with the last reference; a forked copy of the
host never kills the parent's child.
"""

from __future__ import annotations

import errno
import json
import os
import select
import signal
import subprocess
import time
from typing import Any

from hasp.sandbox import spawn
from hasp.sandbox.lockdown import REFUSED_EXIT, REFUSED_PREFIX, missing_layers, refusal_line

MAX_RESPONSE_BYTES = 8 * 1024 * 1024
STDERR_TAIL = 2000


class SandboxError(RuntimeError):
    """The sandbox could not run the code (child died, protocol error, gave up restarting)."""


class SandboxRefused(SandboxError):
    """A required isolation layer could not be installed; no untrusted code ran."""


class SandboxTimeout(SandboxError, TimeoutError):
    """A request exceeded its wall-time budget; the child was killed."""


class Worker:
    """One sandboxed child process, its pipes and its private directory."""

    def __init__(self, label: str) -> None:
        self.label = label  # names the child in error messages
        self.popen: subprocess.Popen[bytes] | None = None
        self.tmpdir: str | None = None
        self.rbuf = b""
        self.owner = os.getpid()
        self.spec: dict[str, Any] | None = None

    @property
    def alive(self) -> bool:
        p = self.popen
        return p is not None and p.poll() is None

    def kill(self) -> None:
        """Kill the child's process group and remove its directory (idempotent)."""
        if os.getpid() != self.owner:  # a forked copy: the child belongs to the parent
            self.popen, self.tmpdir, self.rbuf = None, None, b""
            return
        p, self.popen = self.popen, None
        spawn.kill_group(p)
        tmpdir, self.tmpdir = self.tmpdir, None
        spawn.remove_workdir(tmpdir)
        self.rbuf = b""

    def start(self, driver: str, job: dict[str, Any], deadline: float, *, python: str | None = None,
              **lockdown: Any) -> dict[str, Any]:
        """Start a fresh child running ``driver`` under ``spawn.lockdown_spec(**lockdown)``;
        returns its first message (the driver's greeting)."""
        self.kill()
        self.owner = os.getpid()
        self.tmpdir = spawn.make_workdir("hasp_sbx_")
        spec = self.spec = spawn.lockdown_spec(self.tmpdir, **lockdown)
        try:
            self.popen = spawn.start(driver, self.tmpdir, python=python, bufsize=0)
        except OSError as e:
            self.kill()
            raise SandboxError(f"cannot start sandbox worker: {e}") from e
        for f in (self.popen.stdin, self.popen.stderr):
            os.set_blocking(f.fileno(), False)
        self.write(spawn.first_line(spec, job), deadline, "startup")
        hello = self.read(deadline, "startup")
        # the child refuses by itself; checked here again so a child that did not is not used
        missing = missing_layers(spec, hello.get("protections") or {})
        if missing and not spec.get("allow_weaker"):
            self.kill()
            raise SandboxRefused(f"{self.label}: {refusal_line(missing)}")
        return hello

    def roundtrip(self, line: bytes, deadline: float, what: str) -> dict[str, Any]:
        """Send one request line, return the one response object."""
        self.write(line, deadline, what)
        return self.read(deadline, what)

    def stderr_tail(self) -> str:
        p = self.popen
        if p is None or p.stderr is None:
            return ""
        chunks = []
        try:
            while True:
                b = os.read(p.stderr.fileno(), 65536)
                if not b:
                    break
                chunks.append(b)
        except (BlockingIOError, OSError):
            pass
        return b"".join(chunks).decode("utf-8", "replace")[-STDERR_TAIL:]

    def die(self, why: str) -> None:
        """Kill the child and raise a ``SandboxError`` saying how it ended."""
        p = self.popen
        rc = p.poll() if p is not None else None
        if p is not None and rc is None:
            try:
                rc = p.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                rc = None
        tail = self.stderr_tail()
        self.kill()
        if rc == REFUSED_EXIT:
            line = next((x for x in tail.splitlines() if x.startswith(REFUSED_PREFIX)), "")
            if line:
                raise SandboxRefused(f"{self.label}: {line}")
        if rc is not None and rc < 0:
            try:
                rc_s = f"killed by {signal.Signals(-rc).name}"
            except ValueError:
                rc_s = f"signal {-rc}"
        else:
            rc_s = f"exit code {rc}"
        msg = f"{self.label}: sandbox worker {why} ({rc_s})"
        if tail.strip():
            msg += f"; stderr tail:\n{tail.strip()}"
        raise SandboxError(msg)

    def timeout(self, what: str) -> None:
        self.kill()
        raise SandboxTimeout(f"{self.label}.{what} exceeded its time budget; worker killed")

    def write(self, data: bytes, deadline: float, what: str) -> None:
        p = self.popen
        assert p is not None and p.stdin is not None
        fd = p.stdin.fileno()
        view = memoryview(data)
        while view:
            try:
                n = os.write(fd, view)
                view = view[n:]
                continue
            except BlockingIOError:
                pass
            except (BrokenPipeError, OSError) as e:
                if isinstance(e, BrokenPipeError) or e.errno in (errno.EPIPE, errno.EBADF):
                    self.die(f"died before {what}")
                raise
            left = deadline - time.monotonic()
            if left <= 0:
                self.timeout(what)
            select.select([], [fd], [], left)

    def read(self, deadline: float, what: str) -> dict[str, Any]:
        p = self.popen
        assert p is not None and p.stdout is not None
        fd = p.stdout.fileno()
        while True:
            nl = self.rbuf.find(b"\n")
            if nl >= 0:
                line, self.rbuf = self.rbuf[:nl], self.rbuf[nl + 1:]
                try:
                    msg = json.loads(line)
                except (ValueError, RecursionError):
                    self.die(f"sent a malformed response during {what}: {line[:200]!r}")
                if not isinstance(msg, dict):
                    self.die(f"sent a non-object response during {what}")
                return msg
            if len(self.rbuf) > MAX_RESPONSE_BYTES:
                self.die(f"sent an oversized response during {what}")
            left = deadline - time.monotonic()
            if left <= 0:
                self.timeout(what)
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self.die(f"died during {what}")
            self.rbuf += chunk
