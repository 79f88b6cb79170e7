"""Run an untrusted (generated) PF in a separate, locked-down worker process.

``SandboxedPF`` is a ``ProgramFunction`` the dispatcher can use like any other.
Each instance owns one worker (``hasp.sandbox`` child running the driver
``hasp.pf.sandbox_driver``), started lazily on first use, that holds the PF instance; ``should_activate`` / ``intervene``
are JSON-lines round trips over pipes (tens of microseconds, see
``bench/sandbox_overhead.py``).

Failure mapping (the dispatcher catches all of these and disables the PF for the
episode; nothing here ever takes a rollout down):

* the PF raised inside the sandbox     → ``SandboxPFError`` (message = the PF's exception)
* a call ran longer than ``timeout_s`` → the worker's process group is killed, ``SandboxTimeout``
* the worker died / spoke garbage      → ``SandboxError`` with the tail of its stderr
* the code breaks the static policy    → ``SandboxPolicyError`` (raised by the constructor)
* loading failed (no class, bad init)  → ``SandboxLoadError`` (raised on every later call)

After a timeout or crash the next call starts a fresh worker (the PF's
in-worker state is lost), at most ``max_restarts`` times. The teacher is never
passed into the sandbox: ``intervene`` runs with ``teacher=None``.

Private ctx keys: the worker returns the ``_``-prefixed keys the PF added or
changed (and the ones it deleted) and they are applied to the caller's ctx, so
``EpisodeState.absorb`` carries them across steps as for an in-process PF.
Values must be JSON-compatible (sets/tuples become lists).
"""

from __future__ import annotations

import errno
import json
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from typing import Any

from hasp.pf.base import ProgramFunction, Teacher
from hasp.pf.intervention import Intervention, InterventionType
from hasp.sandbox import seccomp, spawn
from hasp.sandbox.policy import check_policy

DRIVER = "hasp.pf.sandbox_driver"
NOFILE = 16
MAX_RESPONSE_BYTES = 8 * 1024 * 1024
STDERR_TAIL = 2000
_INTERVENTION_KEYS = ("type", "new_action_type", "new_action_arg", "context_text", "reason", "skill_id")


class SandboxError(RuntimeError):
    """The sandbox could not run the PF (worker died, protocol error, gave up restarting)."""


class SandboxTimeout(SandboxError, TimeoutError):
    """A call exceeded its wall-time budget; the worker was killed."""


class SandboxPolicyError(SandboxError):
    """The code violates the static policy; it is never executed."""

    def __init__(self, violations: list[str]) -> None:
        super().__init__("policy violations: " + "; ".join(violations))
        self.violations = list(violations)


class SandboxLoadError(SandboxError):
    """The code ran but no usable PF came out of it (no class, __init__ raised, ...)."""


class SandboxPFError(SandboxError):
    """The PF raised inside the sandbox; the message is the PF's own exception."""


def _json_default(o: Any) -> Any:
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return f"<{type(o).__name__}>"  # host-side objects the PF cannot use anyway


_ENC = json.JSONEncoder(separators=(",", ":"), default=_json_default)


class _Proc:
    """The worker process and its private directory (owned by a finalizer, not by the PF)."""

    def __init__(self) -> None:
        self.popen: subprocess.Popen[bytes] | None = None
        self.tmpdir: str | None = None
        self.rbuf = b""
        self.owner = os.getpid()

    def kill(self) -> None:
        if os.getpid() != self.owner:  # a forked copy: the worker belongs to the parent
            self.popen, self.tmpdir, self.rbuf = None, None, b""
            return
        p, self.popen = self.popen, None
        spawn.kill_group(p)
        tmpdir, self.tmpdir = self.tmpdir, None
        spawn.remove_workdir(tmpdir)
        self.rbuf = b""


class SandboxedPF(ProgramFunction):
    """A proxy PF whose code runs in a sandboxed worker process."""

    def __init__(self, code: str, skill_id: str | None = None, *, timeout_s: float = 2.0,
                 memory_mb: int = 512, load_timeout_s: float = 10.0, max_restarts: int = 3,
                 total_cpu_s: int = 3600, python: str | None = None, probe: bool = False,
                 _skip_policy_for_tests: bool = False, _unrestricted_for_tests: bool = False) -> None:
        self.code = code
        self._skill_id = skill_id or None
        self.timeout_s = float(timeout_s)
        self.memory_mb = int(memory_mb)
        self.load_timeout_s = float(load_timeout_s)
        self.max_restarts = int(max_restarts)
        self.total_cpu_s = int(total_cpu_s)
        self.python = python or sys.executable
        self.probe = probe
        self._skip_policy = _skip_policy_for_tests
        self._unrestricted = _unrestricted_for_tests
        if not _skip_policy_for_tests:
            violations = check_policy(code)
            if violations:
                raise SandboxPolicyError(violations)
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._lock = threading.RLock()
        self._proc = _Proc()
        self._finalizer = weakref.finalize(self, _Proc.kill, self._proc)
        self._owner_pid = os.getpid()
        self._starts = 0
        self._fatal: SandboxError | None = None
        self.hello: dict[str, Any] | None = None
        self.load_info: dict[str, Any] | None = None
        self.calls = 0

    # ------------------------------------------------------------------ pickling (restart lazily)
    _OPTS = ("code", "_skill_id", "timeout_s", "memory_mb", "load_timeout_s", "max_restarts",
             "total_cpu_s", "python", "probe", "_skip_policy", "_unrestricted")

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self._OPTS}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._init_runtime()

    # ------------------------------------------------------------------ attributes from the load response
    @property
    def skill_id(self) -> str:  # type: ignore[override]
        if self._skill_id:
            return self._skill_id
        info = self._info_or_none()
        return str(info.get("skill_id", "")) if info else ""

    @property
    def needs_teacher(self) -> bool:  # type: ignore[override]
        info = self._info_or_none()
        return bool(info.get("needs_teacher", False)) if info else False

    @property
    def max_fires(self) -> int | None:  # type: ignore[override]
        info = self._info_or_none()
        mf = info.get("max_fires") if info else None
        return mf if type(mf) is int and mf >= 0 else None

    @property
    def watches(self) -> list[str] | None:  # type: ignore[override]
        """Declared in the worker; the dispatcher then skips the round trip on other action types."""
        info = self._info_or_none()
        w = info.get("watches") if info else None
        return w if isinstance(w, list) else None

    @property
    def protections(self) -> dict[str, Any]:
        """What the OS boundary actually achieved in this worker (from its ``hello``)."""
        self._ensure()
        return dict((self.hello or {}).get("protections", {}))

    def _info_or_none(self) -> dict[str, Any] | None:
        # Attribute reads must never raise (the dispatcher reads max_fires outside its
        # try-block); a load failure surfaces on the next should_activate instead.
        try:
            self._ensure()
        except SandboxError:
            return None
        return self.load_info

    # ------------------------------------------------------------------ lifecycle
    @property
    def alive(self) -> bool:
        p = self._proc.popen
        return p is not None and p.poll() is None

    def close(self) -> None:
        """Terminate the worker (idempotent; a later call starts a new one)."""
        with self._lock:
            self._proc.kill()

    def __del__(self) -> None:
        try:
            self._finalizer()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __enter__(self) -> SandboxedPF:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ensure(self) -> None:
        with self._lock:
            if self._owner_pid != os.getpid():  # forked host: the worker belongs to the parent
                self._finalizer.detach()
                self._proc = _Proc()
                self._finalizer = weakref.finalize(self, _Proc.kill, self._proc)
                self._owner_pid = os.getpid()
            if self.alive:
                return
            if self._fatal is not None:
                raise self._fatal
            if self._starts > self.max_restarts:
                self._fatal = SandboxError(f"{self._skill_id or 'PF'}: sandbox worker restarted "
                                           f"{self._starts - 1} times; giving up")
                raise self._fatal
            self._starts += 1
            self._start()

    def _start(self) -> None:
        proc = self._proc
        proc.kill()
        proc.owner = os.getpid()
        proc.tmpdir = spawn.make_workdir("hasp_sbx_")
        call_cpu_s = math.ceil(self.timeout_s) + 1
        total_cpu_s = max(self.total_cpu_s, call_cpu_s)
        lockdown = spawn.lockdown_spec(
            proc.tmpdir, memory_mb=self.memory_mb, cpu_s=(call_cpu_s, total_cpu_s), cpu_from_now=True,
            fsize_bytes=0, nofile=NOFILE, seccomp_profile=seccomp.PF_PROFILE)
        job = {"call_cpu_s": call_cpu_s, "total_cpu_s": self.total_cpu_s, "probe": self.probe,
               "unsafe_skip_policy": self._skip_policy, "unsafe_unrestricted_runtime": self._unrestricted}
        deadline = time.monotonic() + self.load_timeout_s
        try:
            proc.popen = spawn.start(DRIVER, proc.tmpdir, python=self.python, bufsize=0)
        except OSError as e:
            proc.kill()
            raise SandboxError(f"cannot start sandbox worker: {e}") from e
        for f in (proc.popen.stdin, proc.popen.stderr):
            os.set_blocking(f.fileno(), False)
        self._write(spawn.first_line(lockdown, job), deadline, "startup")
        hello = self._read(deadline, "startup")
        if hello.get("op") != "hello":
            self._die(f"unexpected first message {str(hello)[:200]}")
        self.hello = hello
        resp = self._roundtrip({"op": "load", "code": self.code, "skill_id": self._skill_id},
                               deadline, "load")
        if not resp.get("ok"):
            proc.kill()
            self._fatal = SandboxLoadError(f"{self._skill_id or 'PF'}: {resp.get('error', 'load failed')}"
                                           + (f" ({resp['where']})" if resp.get("where") else ""))
            self.load_info = resp
            raise self._fatal
        self.load_info = resp

    # ------------------------------------------------------------------ protocol
    def _stderr_tail(self) -> str:
        p = self._proc.popen
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

    def _die(self, why: str) -> None:
        p = self._proc.popen
        rc = p.poll() if p is not None else None
        if p is not None and rc is None:
            try:
                rc = p.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                rc = None
        tail = self._stderr_tail()
        self._proc.kill()
        if rc is not None and rc < 0:
            try:
                rc_s = f"killed by {signal.Signals(-rc).name}"
            except ValueError:
                rc_s = f"signal {-rc}"
        else:
            rc_s = f"exit code {rc}"
        msg = f"{self._skill_id or 'PF'}: sandbox worker {why} ({rc_s})"
        if tail.strip():
            msg += f"; stderr tail:\n{tail.strip()}"
        raise SandboxError(msg)

    def _write(self, data: bytes, deadline: float, what: str) -> None:
        p = self._proc.popen
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
                    self._die(f"died before {what}")
                raise
            left = deadline - time.monotonic()
            if left <= 0:
                self._timeout(what)
            select.select([], [fd], [], left)

    def _read(self, deadline: float, what: str) -> dict[str, Any]:
        proc = self._proc
        p = proc.popen
        assert p is not None and p.stdout is not None
        fd = p.stdout.fileno()
        while True:
            nl = proc.rbuf.find(b"\n")
            if nl >= 0:
                line, proc.rbuf = proc.rbuf[:nl], proc.rbuf[nl + 1:]
                try:
                    msg = json.loads(line)
                except (ValueError, RecursionError):
                    self._die(f"sent a malformed response during {what}: {line[:200]!r}")
                if not isinstance(msg, dict):
                    self._die(f"sent a non-object response during {what}")
                return msg
            if len(proc.rbuf) > MAX_RESPONSE_BYTES:
                self._die(f"sent an oversized response during {what}")
            left = deadline - time.monotonic()
            if left <= 0:
                self._timeout(what)
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self._die(f"died during {what}")
            proc.rbuf += chunk

    def _timeout(self, what: str) -> None:
        self._proc.kill()
        raise SandboxTimeout(f"{self._skill_id or 'PF'}.{what} exceeded its time budget; worker killed")

    def _roundtrip(self, req: dict[str, Any], deadline: float, what: str) -> dict[str, Any]:
        try:
            data = _ENC.encode(req).encode() + b"\n"
        except (TypeError, ValueError) as e:
            raise SandboxError(f"cannot send ctx to the sandbox: {e}") from e
        self._write(data, deadline, what)
        return self._read(deadline, what)

    # ------------------------------------------------------------------ calls
    def call_raw(self, method: str, ctx: dict[str, Any], action_type: str, arg: str,
                 timeout_s: float | None = None) -> dict[str, Any]:
        """One call; returns the worker's response dict (``ok``, ``result``, ``result_type``,
        ``error``, ``where``, ``log``...) after applying the private ctx changes to ``ctx``.

        Raises only for sandbox failures (``SandboxTimeout``, ``SandboxError``), not when the
        PF itself raised (that is ``{"ok": False, "error": ...}``)."""
        with self._lock:
            self._ensure()
            deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
            resp = self._roundtrip({"op": "call", "method": method, "ctx": ctx,
                                    "action_type": action_type, "arg": arg}, deadline, method)
            self.calls += 1
        for k in resp.get("ctx_deleted") or ():
            if isinstance(k, str) and k.startswith("_"):
                ctx.pop(k, None)
        priv = resp.get("ctx_private")
        if isinstance(priv, dict):
            for k, v in priv.items():
                if isinstance(k, str) and k.startswith("_"):  # the worker may never touch public keys
                    ctx[k] = v
        return resp

    def _pf_error(self, where: str, resp: dict[str, Any]) -> SandboxPFError:
        msg = str(resp.get("error", "unknown error"))
        if resp.get("where"):
            msg += f" ({resp['where']})"
        return SandboxPFError(msg)

    def should_activate(self, ctx: dict[str, Any], action_type: str, arg: str) -> bool:
        resp = self.call_raw("should_activate", ctx, action_type, arg)
        if not resp.get("ok"):
            raise self._pf_error("should_activate", resp)
        return resp.get("result") is True

    def intervene(self, ctx: dict[str, Any], action_type: str, arg: str,
                  teacher: Teacher | None = None) -> Intervention:
        resp = self.call_raw("intervene", ctx, action_type, arg)
        if not resp.get("ok"):
            raise self._pf_error("intervene", resp)
        return to_intervention(resp)


def to_intervention(resp: dict[str, Any]) -> Intervention:
    """Turn a worker's intervene response into a validated ``Intervention`` (raises TypeError/ValueError)."""
    rtype = resp.get("result_type")
    res = resp.get("result")
    if rtype != "Intervention" or not isinstance(res, dict):
        raise TypeError(f"intervene returned {rtype}, not Intervention")
    fields = {k: res.get(k) for k in _INTERVENTION_KEYS}
    for k in ("new_action_type", "new_action_arg"):
        if fields[k] is not None and not isinstance(fields[k], str):
            raise TypeError(f"Intervention.{k} must be str or None")
    for k in ("context_text", "reason", "skill_id"):
        v = fields[k]
        fields[k] = "" if v is None else v
        if not isinstance(fields[k], str):
            raise TypeError(f"Intervention.{k} must be str")
    try:
        fields["type"] = InterventionType(fields["type"])
    except ValueError as e:
        raise ValueError(f"illegal Intervention.type {fields['type']!r}") from e
    return Intervention(**fields)


def probe(timeout_s: float = 10.0) -> dict[str, Any]:
    """Start a throw-away worker that tries fork / socket / file writes / a 2 GB allocation
    after its setup, and return its ``hello`` (``protections`` + ``probe`` results)."""
    code = ("from hasp.pf.base import ProgramFunction\nfrom hasp.pf.registry import register_pf\n"
            "@register_pf('probe')\nclass P(ProgramFunction):\n"
            "    def should_activate(self, ctx, action_type, arg):\n        return False\n")
    pf = SandboxedPF(code, "probe", load_timeout_s=timeout_s, probe=True)
    try:
        pf._ensure()
        return dict(pf.hello or {})
    finally:
        pf.close()
