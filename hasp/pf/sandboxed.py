"""Run an untrusted (generated) PF in a separate, locked-down worker process.

``SandboxedPF`` is a ``ProgramFunction`` the dispatcher can use like any other.
Each instance owns one worker (a ``hasp.sandbox.worker.Worker`` running the
driver ``hasp.pf.sandbox_driver``), started lazily on first use, that holds the
PF instance; ``should_activate`` / ``intervene`` are JSON-lines round trips over
pipes (tens of microseconds, see ``bench/sandbox_overhead.py``).

Failure mapping (the dispatcher catches all of these and disables the PF for the
episode; nothing here ever takes a rollout down):

* the PF raised inside the sandbox     → ``SandboxPFError`` (message = the PF's exception)
* a call ran longer than ``timeout_s`` → the worker's process group is killed, ``SandboxTimeout``
* the worker died / spoke garbage      → ``SandboxError`` with the tail of its stderr
  (both from ``hasp.sandbox.worker``)
* the code breaks the static policy    → ``SandboxPolicyError`` (raised by the constructor)
* loading failed (no class, bad init)  → ``SandboxLoadError`` (raised on every later call)

After a timeout or crash the next call starts a fresh worker (the PF's
in-worker state is lost), at most ``max_restarts`` times. The teacher is never
passed into the sandbox: ``intervene`` runs with ``teacher=None``.

Private ctx keys: each sandboxed PF has its own namespace. The worker sees the
public keys and only the ``_`` keys this PF wrote earlier; what it adds, changes or
deletes is stored under ``ctx[namespace_key(skill_id)]`` (itself a ``_`` key, so
``EpisodeState.absorb`` carries it across steps), never in the shared keys trusted
PFs rely on (``_final_redirects``). Values must be JSON-compatible (sets/tuples
become lists).

Fail closed: a worker whose lockdown misses a required layer refuses to start
(``SandboxRefused``, sticky) unless ``allow_weaker`` was chosen; the missing layers
are then in ``protections["weaker"]`` and logged on every start. The worker cuts
returned text to the configured caps (one character over, so the dispatcher sees and
records the cut) and reports the CPU time of each call (``last_call_cpu_s``) for the
dispatcher's per-episode budget.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import threading
import time
import weakref
from typing import Any

from hasp.config import SandboxParams
from hasp.pf.base import ProgramFunction, Teacher
from hasp.pf.intervention import Intervention, InterventionType
from hasp.sandbox import seccomp
from hasp.sandbox.policy import check_policy
from hasp.sandbox.worker import SandboxError, SandboxRefused, Worker

log = logging.getLogger(__name__)
DRIVER = "hasp.pf.sandbox_driver"
NS_PREFIX = "_sandbox:"
NOFILE = 16
_INTERVENTION_KEYS = ("type", "new_action_type", "new_action_arg", "context_text", "reason", "skill_id")


def namespace_key(skill_id: str | None) -> str:
    """The ctx key holding one sandboxed PF's private keys."""
    return NS_PREFIX + (skill_id or "")


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


class SandboxedPF(ProgramFunction):
    """A proxy PF whose code runs in a sandboxed worker process."""

    def __init__(self, code: str, skill_id: str | None = None, *, timeout_s: float = 2.0,
                 memory_mb: int = 512, load_timeout_s: float = 10.0, max_restarts: int = 3,
                 total_cpu_s: int = 3600, python: str | None = None, probe: bool = False,
                 sandbox: SandboxParams | None = None, allow_weaker: bool | None = None,
                 _skip_policy_for_tests: bool = False, _unrestricted_for_tests: bool = False) -> None:
        """``sandbox`` (the params section; schema defaults when None) sets the weaker-mode
        opt-in, the caps on returned text and the per-episode CPU budget the dispatcher
        enforces; ``allow_weaker`` overrides its opt-in for one PF."""
        self.code = code
        self._skill_id = skill_id or None
        self.timeout_s = float(timeout_s)
        self.memory_mb = int(memory_mb)
        self.load_timeout_s = float(load_timeout_s)
        self.max_restarts = int(max_restarts)
        self.total_cpu_s = int(total_cpu_s)
        self.python = python or sys.executable
        self.probe = probe
        self.sandbox = sandbox if sandbox is not None else SandboxParams()
        self.allow_weaker = self.sandbox.allow_weaker if allow_weaker is None else bool(allow_weaker)
        self._skip_policy = _skip_policy_for_tests
        self._unrestricted = _unrestricted_for_tests
        if not _skip_policy_for_tests:
            violations = check_policy(code)
            if violations:
                raise SandboxPolicyError(violations)
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._lock = threading.RLock()
        self._proc = Worker(self._skill_id or "PF")
        self._finalizer = weakref.finalize(self, Worker.kill, self._proc)
        self._owner_pid = os.getpid()
        self._starts = 0
        self._fatal: SandboxError | None = None
        self.hello: dict[str, Any] | None = None
        self.load_info: dict[str, Any] | None = None
        self.calls = 0
        self._tls = threading.local()

    # ------------------------------------------------------------------ pickling (restart lazily)
    _OPTS = ("code", "_skill_id", "timeout_s", "memory_mb", "load_timeout_s", "max_restarts",
             "total_cpu_s", "python", "probe", "sandbox", "allow_weaker",
             "_skip_policy", "_unrestricted")

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

    @property
    def weaker(self) -> list[str]:
        """Isolation layers missing in this worker (only ever non-empty with ``allow_weaker``)."""
        return list((self.hello or {}).get("protections", {}).get("weaker") or [])

    @property
    def boundary_limits(self) -> tuple[int, int, float]:
        """(argument cap, injected-text cap, CPU budget per episode) the dispatcher holds this PF to."""
        sb = self.sandbox
        return sb.max_action_arg_chars, sb.max_context_chars, sb.pf_cpu_budget_s

    def last_call_cpu_s(self) -> float:
        """CPU seconds the worker spent on this thread's last call (0.0 before any)."""
        return getattr(self._tls, "cpu_s", 0.0)

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
        return self._proc.alive

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
                self._proc = Worker(self._skill_id or "PF")
                self._finalizer = weakref.finalize(self, Worker.kill, self._proc)
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
            try:
                self._start()
            except SandboxRefused as e:  # the machine will not grow the layer: do not retry
                self._fatal = e
                raise

    def _start(self) -> None:
        proc = self._proc
        call_cpu_s = math.ceil(self.timeout_s) + 1
        job = {"call_cpu_s": call_cpu_s, "total_cpu_s": self.total_cpu_s, "probe": self.probe,
               "max_arg_chars": self.sandbox.max_action_arg_chars,
               "max_context_chars": self.sandbox.max_context_chars,
               "unsafe_skip_policy": self._skip_policy, "unsafe_unrestricted_runtime": self._unrestricted}
        deadline = time.monotonic() + self.load_timeout_s
        hello = proc.start(DRIVER, job, deadline, python=self.python, memory_mb=self.memory_mb,
                           cpu_s=(call_cpu_s, max(self.total_cpu_s, call_cpu_s)), cpu_from_now=True,
                           fsize_bytes=0, nofile=NOFILE, seccomp_profile=seccomp.PF_PROFILE,
                           landlock="no_files",
                           allow_weaker=self.allow_weaker)
        if hello.get("op") != "hello":
            proc.die(f"unexpected first message {str(hello)[:200]}")
        self.hello = hello
        weaker = (hello.get("protections") or {}).get("weaker")
        if weaker:
            log.warning("%s: sandbox running in the weaker mode the user allowed; missing: %s",
                        self._skill_id or "PF", "; ".join(weaker))
        resp = self._roundtrip({"op": "load", "code": self.code, "skill_id": self._skill_id},
                               deadline, "load")
        if not resp.get("ok"):
            proc.kill()
            self._fatal = SandboxLoadError(f"{self._skill_id or 'PF'}: {resp.get('error', 'load failed')}"
                                           + (f" ({resp['where']})" if resp.get("where") else ""))
            self.load_info = resp
            raise self._fatal
        self.load_info = resp

    def _roundtrip(self, req: dict[str, Any], deadline: float, what: str) -> dict[str, Any]:
        try:
            data = _ENC.encode(req).encode() + b"\n"
        except (TypeError, ValueError) as e:
            raise SandboxError(f"cannot send ctx to the sandbox: {e}") from e
        return self._proc.roundtrip(data, deadline, what)

    # ------------------------------------------------------------------ calls
    def call_raw(self, method: str, ctx: dict[str, Any], action_type: str, arg: str,
                 timeout_s: float | None = None) -> dict[str, Any]:
        """One call; returns the worker's response dict (``ok``, ``result``, ``result_type``,
        ``error``, ``where``, ``log``...) after applying the private ctx changes to ``ctx``.

        Raises only for sandbox failures (``SandboxTimeout``, ``SandboxError``), not when the
        PF itself raised (that is ``{"ok": False, "error": ...}``)."""
        ns_key = namespace_key(self._skill_id)
        own = ctx.get(ns_key)
        own = own if isinstance(own, dict) else {}
        sent = {k: v for k, v in ctx.items() if k[:1] != "_"}  # public keys + this PF's own only
        sent.update(own)
        with self._lock:
            self._ensure()
            deadline = time.monotonic() + (self.timeout_s if timeout_s is None else timeout_s)
            self._tls.cpu_s = 0.0
            resp = self._roundtrip({"op": "call", "method": method, "ctx": sent,
                                    "action_type": action_type, "arg": arg}, deadline, method)
            self.calls += 1
        cpu = resp.get("cpu_s")
        self._tls.cpu_s = float(cpu) if type(cpu) in (int, float) and cpu >= 0 else 0.0
        deleted = [k for k in resp.get("ctx_deleted") or () if isinstance(k, str) and k in own]
        priv = resp.get("ctx_private")
        if deleted or (isinstance(priv, dict) and priv):
            new = {k: v for k, v in own.items() if k not in deleted}
            if isinstance(priv, dict):
                new.update({k: v for k, v in priv.items() if isinstance(k, str) and k.startswith("_")})
            ctx[ns_key] = new  # never the shared keys: only this PF's namespace
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
