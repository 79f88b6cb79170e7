"""The sandbox worker: runs one untrusted PF in a locked-down process.

Started by ``hasp.pf.sandbox.SandboxedPF`` as::

    python -I -B /path/to/hasp/pf/sandbox_worker.py --workdir DIR [--memory-mb N] ...

(``python -m hasp.pf.sandbox_worker`` works too when ``hasp`` is importable).
It speaks JSON lines: one request per line on stdin, one response per line on
stdout. The first line it writes is ``{"op": "hello", "protections": {...}}``.

Requests::

    {"op": "load", "code": "...", "skill_id": "x" | null}
        -> {"ok": true, "skill_id", "class_name", "needs_teacher", "max_fires", "watches", "interface", ...}
    {"op": "call", "method": "should_activate" | "intervene", "ctx": {...},
     "action_type": "SEARCH", "arg": "..."}
        -> {"ok": true, "result": bool | intervention-dict, "result_type": "bool",
            "ctx_private": {changed "_" keys}, "ctx_deleted": [...]}
        |  {"ok": false, "error": "TypeName: message", "where": "line N: ..."}
    {"op": "ping"} -> {"ok": true}
    {"op": "exit"}

Only ``_``-prefixed ctx keys the PF *changed* (or added) come back in
``ctx_private``; removed ones are listed in ``ctx_deleted``. The teacher is
always ``None`` inside the sandbox.

Setup order (each step fails soft and is reported in ``hello``): import
everything the worker will ever need → move the protocol off fd 1 → chdir to
the private workdir → ``unshare(CLONE_NEWNET)`` → rlimits (AS, CPU, NPROC=0,
NOFILE, FSIZE=0, CORE=0) → drop to uid/gid ``nobody`` (when root; this is what
makes NPROC bite, root ignores it) → no_new_privs + not dumpable → seccomp
filter (no fork/exec/socket/kill/ptrace/mount, no opening files for writing).
"""

from __future__ import annotations

import argparse
import builtins
import ctypes
import io
import json
import linecache
import math
import os
import platform
import resource
import struct
import sys
import time
import traceback
import types
import warnings
from pathlib import Path

if __package__ in (None, ""):  # run by path under -I: make the project importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import inspect  # noqa: E402

from hasp.pf.base import ProgramFunction, Teacher, watched_types  # noqa: E402
from hasp.pf.intervention import Intervention, InterventionType  # noqa: E402
from hasp.pf.registry import collecting, register_pf  # noqa: E402
from hasp.pf.sandbox_policy import ALLOWED_MODULES, UNSAFE_ATTRS, check_policy  # noqa: E402

# Pre-import the allow-list: after setup the process may not be able to read the
# filesystem, and the restricted importer only hands out already-loaded modules.
for _m in sorted(ALLOWED_MODULES):
    __import__(_m)
# ... and the codecs a PF might use (codec modules are imported lazily by str.encode).
for _enc in ("ascii", "latin-1", "utf-8", "utf-16", "utf-32", "cp1252"):
    "".encode(_enc)

CANDIDATE_MODULE = "hasp_candidate"
CANDIDATE_FILE = "<candidate>"
MAX_PRINT_CHARS = 4000
MAX_ERROR_CHARS = 2000

# ---------------------------------------------------------------------------- restricted runtime

_SAFE_BUILTIN_NAMES = (
    "abs", "all", "any", "ascii", "bin", "bool", "bytearray", "bytes", "callable", "chr",
    "classmethod", "complex", "dict", "dir", "divmod", "enumerate", "filter", "float", "format",
    "frozenset", "hash", "hex", "id", "int", "isinstance", "issubclass", "iter", "len", "list",
    "map", "max", "min", "next", "object", "oct", "ord", "pow", "property", "range", "repr",
    "reversed", "round", "set", "slice", "sorted", "staticmethod", "str", "sum", "super",
    "tuple", "type", "zip", "aiter", "anext", "True", "False", "None", "NotImplemented",
    "Ellipsis", "__build_class__",
)
# Not offered: eval exec compile open __import__(raw) globals locals vars input breakpoint
# exit quit memoryview help — and getattr/setattr/delattr/hasattr only in guarded form.

# Modules a PF may not see even inside an allowed module (escape hatches to eval/frames).
_PROXY_EXCLUDE = {
    "typing": {"get_type_hints", "ForwardRef", "TYPE_CHECKING"},
    "string": {"Formatter"},
}


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _attr_allowed(obj: object, name: object) -> str:
    if type(name) is not str:
        raise TypeError("attribute name must be str")
    if name in UNSAFE_ATTRS or (_is_dunder(name) and name != "__init__"):
        raise AttributeError(f"access to {name!r} is not allowed in the sandbox")
    if name.startswith("_") and not _is_dunder(name):
        owner = obj if isinstance(obj, type) else type(obj)
        if type.__getattribute__(owner, "__module__") != CANDIDATE_MODULE:
            raise AttributeError(f"private attribute {name!r} of a non-PF object is not allowed in the sandbox")
    return name


def _guarded_getattr(obj, name, *default):
    _attr_allowed(obj, name)
    return getattr(obj, name, *default)


def _guarded_hasattr(obj, name):
    try:
        _attr_allowed(obj, name)
    except AttributeError:
        return False
    return hasattr(obj, name)


def _guarded_setattr(obj, name, value):
    _attr_allowed(obj, name)
    if isinstance(obj, types.ModuleType) or obj in _PROTECTED_OBJECTS:
        raise AttributeError("patching runtime objects is not allowed in the sandbox")
    return setattr(obj, name, value)


def _guarded_delattr(obj, name):
    _attr_allowed(obj, name)
    if isinstance(obj, types.ModuleType) or obj in _PROTECTED_OBJECTS:
        raise AttributeError("patching runtime objects is not allowed in the sandbox")
    return delattr(obj, name)


_PROTECTED_OBJECTS: tuple = (ProgramFunction, Intervention, InterventionType, register_pf)


class _PrintSink:
    """``print`` inside the sandbox: captured (bounded) and returned with the response."""

    def __init__(self) -> None:
        self.buf = io.StringIO()

    def __call__(self, *args, sep=" ", end="\n", **_kw) -> None:
        if self.buf.tell() >= MAX_PRINT_CHARS:
            return
        s = (sep if isinstance(sep, str) else " ").join(str(a) for a in args) + (end if isinstance(end, str) else "\n")
        self.buf.write(s[: MAX_PRINT_CHARS - self.buf.tell()])

    def take(self) -> str:
        s = self.buf.getvalue()
        self.buf = io.StringIO()
        return s


_PRINT = _PrintSink()


def _proxy_module(name: str, cache: dict[str, types.ModuleType]) -> types.ModuleType:
    """A trimmed copy of an allowed module: public names only, no module-valued attributes
    except other allowed modules (``typing.sys`` / ``collections._sys`` are not reachable)."""
    if name in cache:
        return cache[name]
    real = sys.modules[name]
    proxy = types.ModuleType(name)
    cache[name] = proxy
    excluded = _PROXY_EXCLUDE.get(name, set())
    for attr in dir(real):
        if attr.startswith("_") and not (name == "__future__" and not attr.startswith("__")):
            continue
        if attr in excluded or attr in UNSAFE_ATTRS:
            continue
        val = getattr(real, attr, None)
        if isinstance(val, types.ModuleType):
            if val.__name__ in ALLOWED_MODULES:
                setattr(proxy, attr, _proxy_module(val.__name__, cache))
            continue
        setattr(proxy, attr, val)
    return proxy


def _preamble() -> dict[str, object]:
    return {"ProgramFunction": ProgramFunction, "Intervention": Intervention,
            "InterventionType": InterventionType, "register_pf": register_pf, "Teacher": Teacher}


def _fake_hasp_modules() -> dict[str, types.ModuleType]:
    """``import hasp.pf.base`` etc. inside the sandbox: modules holding only the preamble."""
    mods: dict[str, types.ModuleType] = {}
    for n in ("hasp", "hasp.pf", "hasp.pf.base", "hasp.pf.intervention", "hasp.pf.registry"):
        m = types.ModuleType(n)
        if n != "hasp":
            for k, v in _preamble().items():
                setattr(m, k, v)
        mods[n] = m
    mods["hasp"].pf = mods["hasp.pf"]
    for leaf in ("base", "intervention", "registry"):
        setattr(mods["hasp.pf"], leaf, mods[f"hasp.pf.{leaf}"])
    return mods


def _make_restricted_import():
    cache: dict[str, types.ModuleType] = {}
    fakes = _fake_hasp_modules()
    proxies = {n: _proxy_module(n, cache) for n in sorted(ALLOWED_MODULES)}

    def _import(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002
        if level:
            raise ImportError("relative imports are not allowed in the sandbox")
        table = fakes if name in fakes else proxies if name in proxies else None
        if table is None:
            raise ImportError(f"import of {name!r} is not allowed in the sandbox")
        if fromlist:
            return table[name]
        return table[name.split(".")[0]]

    return _import


def _safe_builtins() -> dict[str, object]:
    b: dict[str, object] = {n: getattr(builtins, n) for n in _SAFE_BUILTIN_NAMES}
    for n in dir(builtins):  # every exception class
        v = getattr(builtins, n)
        if isinstance(v, type) and issubclass(v, BaseException):
            b[n] = v
    b.update(getattr=_guarded_getattr, hasattr=_guarded_hasattr, setattr=_guarded_setattr,
             delattr=_guarded_delattr, print=_PRINT, __import__=_make_restricted_import())
    return b


# ---------------------------------------------------------------------------- OS protections

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
PR_SET_NO_NEW_PRIVS = 38
PR_SET_DUMPABLE = 4
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
AUDIT_ARCH_X86_64 = 0xC000003E
NOBODY = 65534

# x86_64 syscall numbers denied with EPERM
_DENY_X86_64 = {
    "socket": 41, "connect": 42, "accept": 43, "bind": 49, "listen": 50, "socketpair": 53,
    "accept4": 288, "clone": 56, "fork": 57, "vfork": 58, "execve": 59, "clone3": 435,
    "execveat": 322, "kill": 62, "ptrace": 101, "creat": 85, "openat2": 437, "mount": 165,
    "umount2": 166, "pivot_root": 155, "chroot": 161, "unshare": 272, "setns": 308,
    "process_vm_readv": 310, "process_vm_writev": 311, "bpf": 321, "perf_event_open": 298,
    "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
    "keyctl": 250, "add_key": 248, "request_key": 249, "init_module": 175, "finit_module": 313,
    "delete_module": 176, "kexec_load": 246, "kexec_file_load": 320, "reboot": 169,
    "open_by_handle_at": 304, "name_to_handle_at": 303, "link": 86, "symlink": 88, "linkat": 265,
    "symlinkat": 266, "rename": 82, "renameat": 264, "renameat2": 316, "unlink": 87,
    "unlinkat": 263, "mkdir": 83, "mkdirat": 258, "rmdir": 84, "chmod": 90, "fchmod": 91,
    "fchmodat": 268, "chown": 92, "fchown": 93, "lchown": 94, "fchownat": 260, "truncate": 76,
    "ftruncate": 77, "mknod": 133, "mknodat": 259, "setpriority": 141, "sched_setaffinity": 203,
    "personality": 135, "memfd_create": 319, "pidfd_open": 434, "pidfd_send_signal": 424,
    "pidfd_getfd": 438, "setsid": 112, "setpgid": 109,
}
_NR_OPEN, _NR_OPENAT, _NR_PRLIMIT64 = 2, 257, 302
# O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND | __O_TMPFILE
_OPEN_WRITE_MASK = 0o1 | 0o2 | 0o100 | 0o1000 | 0o2000 | 0o20000000


def _bpf_program() -> bytes:
    LD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
    ALLOW, DENY, KILL = 0x7FFF0000, 0x00050000 | 1, 0x80000000  # RET_ERRNO | EPERM
    prog: list[tuple[int, int, int, int] | tuple[str, ...]] = []
    # symbolic jumps: ("jeq", k, target_label) etc.; resolved below
    prog.append((LD, 0, 0, 4))                        # arch
    prog.append(("j", JEQ, AUDIT_ARCH_X86_64, "+1", "kill"))
    prog.append((LD, 0, 0, 0))                        # nr
    prog.append(("j", JGE, 0x40000000, "deny", "+1"))  # x32 ABI
    for nr in sorted(set(_DENY_X86_64.values())):
        prog.append(("j", JEQ, nr, "deny", "+1"))
    prog.append(("j", JEQ, _NR_OPEN, "open1", "+1"))
    prog.append(("j", JEQ, _NR_OPENAT, "open2", "+1"))
    prog.append(("j", JEQ, _NR_PRLIMIT64, "prlimit", "+1"))
    prog.append((RET, 0, 0, ALLOW))
    labels = {}
    labels["open1"] = len(prog)
    prog.append((LD, 0, 0, 16 + 8 * 1))
    prog.append(("j", JSET, _OPEN_WRITE_MASK, "deny", "allow"))
    labels["open2"] = len(prog)
    prog.append((LD, 0, 0, 16 + 8 * 2))
    prog.append(("j", JSET, _OPEN_WRITE_MASK, "deny", "allow"))
    labels["prlimit"] = len(prog)
    prog.append((LD, 0, 0, 16))                       # pid (args[0]) must be 0 = self
    prog.append(("j", JEQ, 0, "allow", "deny"))
    labels["allow"] = len(prog)
    prog.append((RET, 0, 0, ALLOW))
    labels["deny"] = len(prog)
    prog.append((RET, 0, 0, DENY))
    labels["kill"] = len(prog)
    prog.append((RET, 0, 0, KILL))

    out = b""
    for i, ins in enumerate(prog):
        if ins[0] == "j":
            _, code, k, t, f = ins

            def off(lbl: str) -> int:
                o = 0 if lbl == "+1" else labels[lbl] - (i + 1)
                if not 0 <= o <= 255:
                    raise ValueError("BPF jump out of range")
                return o
            out += struct.pack("HBBI", code, off(t), off(f), k)
        else:
            code, jt, jf, k = ins
            out += struct.pack("HBBI", code, jt, jf, k)
    return out


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _install_seccomp(libc) -> None:
    if platform.machine() != "x86_64":
        raise OSError("seccomp filter only built for x86_64")
    prog = _bpf_program()
    buf = ctypes.create_string_buffer(prog, len(prog))
    fprog = _SockFprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def _setrlimit(prot: dict, key: str, res: int, soft: int, hard: int | None = None) -> None:
    hard = soft if hard is None else hard
    try:
        resource.setrlimit(res, (soft, hard))
        prot[key] = soft if soft == hard else [soft, hard]
    except (ValueError, OSError) as e:
        prot[key] = None
        prot.setdefault("errors", []).append(f"{key}: {e}")


def apply_protections(args: argparse.Namespace) -> dict:
    prot: dict = {"pid": os.getpid()}
    libc = _libc()
    # private working directory
    try:
        os.makedirs(args.workdir, exist_ok=True)
        if os.geteuid() == 0 and not args.no_setuid:
            os.chown(args.workdir, NOBODY, NOBODY)
        os.chdir(args.workdir)
        prot["workdir"] = args.workdir
    except OSError as e:
        prot["workdir"] = None
        prot.setdefault("errors", []).append(f"workdir: {e}")
    # network namespace
    prot["netns"] = False
    if not args.no_netns:
        if libc.unshare(CLONE_NEWNET) == 0:
            prot["netns"] = True
        else:
            err = os.strerror(ctypes.get_errno())
            if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
                prot["netns"] = True
                prot["userns"] = True
            else:
                prot.setdefault("errors", []).append(f"netns: {err}")
    # resource limits
    mem = args.memory_mb * 1024 * 1024
    _setrlimit(prot, "rlimit_as", resource.RLIMIT_AS, mem)
    total = max(args.total_cpu_s, args.call_cpu_s)
    _setrlimit(prot, "rlimit_cpu", resource.RLIMIT_CPU, min(total, _cpu_used() + args.call_cpu_s), total)
    _setrlimit(prot, "rlimit_fsize", resource.RLIMIT_FSIZE, 0)
    _setrlimit(prot, "rlimit_core", resource.RLIMIT_CORE, 0)
    _setrlimit(prot, "rlimit_nofile", resource.RLIMIT_NOFILE, args.nofile)
    _setrlimit(prot, "rlimit_nproc", resource.RLIMIT_NPROC, 0)
    # drop privileges (root ignores RLIMIT_NPROC; nobody does not)
    prot["uid"] = os.geteuid()
    if os.geteuid() == 0 and not args.no_setuid and not prot.get("userns"):
        try:
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
            prot["uid"] = os.geteuid()
        except OSError as e:
            prot.setdefault("errors", []).append(f"setuid: {e}")
    prot["uid_dropped"] = prot["uid"] != 0
    prot["no_new_privs"] = libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
    prot["not_dumpable"] = libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    prot["seccomp"] = False
    if not args.no_seccomp:
        try:
            _install_seccomp(libc)
            prot["seccomp"] = True
        except (OSError, ValueError) as e:
            prot.setdefault("errors", []).append(f"seccomp: {e}")
    return prot


def _cpu_used() -> int:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return int(math.ceil(ru.ru_utime + ru.ru_stime))


def probe_protections(workdir: str) -> dict[str, str]:
    """Try the things a hostile PF would try, *after* setup, with the real os module."""
    out: dict[str, str] = {}

    def attempt(name, fn):
        try:
            r = fn()
            out[name] = f"ALLOWED ({r})"
        except BaseException as e:  # noqa: BLE001
            out[name] = f"blocked ({type(e).__name__}: {e})"

    def fork():
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
        return pid

    def sock():
        import socket
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(0.5)
        try:
            s.connect(("127.0.0.1", 9))
        finally:
            s.close()
        return "connected"

    outside = f"/tmp/hasp_sandbox_probe_{os.getpid()}"

    def write_outside():
        try:
            with open(outside, "w") as f:
                f.write("x")
        finally:
            if os.path.exists(outside):  # an empty file can be created when only FSIZE=0 holds
                os.unlink(outside)
        return outside

    def write_workdir():
        p = os.path.join(workdir, "probe.txt")
        with open(p, "w") as f:
            f.write("x")
        return p

    def big_alloc():
        b = bytearray(2 * 1024 ** 3)
        return len(b)

    attempt("fork", fork)
    attempt("socket_connect", sock)
    attempt("write_outside_workdir", write_outside)
    attempt("write_workdir", write_workdir)
    attempt("alloc_2GB", big_alloc)
    return out


# ---------------------------------------------------------------------------- request handling

def _json_default(o):
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    raise TypeError(f"{type(o).__name__} value is not JSON-compatible")


_ENC = json.JSONEncoder(separators=(",", ":"), default=_json_default)
_ENC_SORTED = json.JSONEncoder(separators=(",", ":"), sort_keys=True, default=_json_default)
_SCALARS = (int, float, str, bool, type(None))


def _snapshot(v):
    """A comparable, immutable image of a private ctx value (scalars as-is, containers as JSON)."""
    t = type(v)
    if t in _SCALARS:
        return (t, v)  # the type too: True == 1, but a PF that swaps them changed the value
    return (list, _ENC_SORTED.encode(v))


def _err(e: BaseException) -> dict:
    try:
        msg = f"{type(e).__name__}: {e}"
    except BaseException:  # noqa: BLE001 - a hostile __str__
        msg = f"{type(e).__name__}: <unprintable>"
    where = ""
    try:
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename == CANDIDATE_FILE]
        if frames:
            f = frames[-1]
            where = f"line {f.lineno} in {f.name}: {(f.line or '').strip()}"[:300]
    except BaseException:  # noqa: BLE001
        pass
    out = {"ok": False, "error": msg[:MAX_ERROR_CHARS]}
    if where:
        out["where"] = where
    return out


class Worker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.pf: ProgramFunction | None = None
        self.skill_id: str | None = None
        self.call_cpu_s = args.call_cpu_s
        self.total_cpu_s = max(args.total_cpu_s, args.call_cpu_s)
        self.restricted = not args.unsafe_unrestricted_runtime
        self.builtins = _safe_builtins() if self.restricted else builtins.__dict__
        self._armed_at = -10.0

    # -- per-call CPU budget: the kernel kills a runaway even if the host is gone.
    # The soft limit is re-armed once a full CPU second has been used since the last
    # arming, so every call gets at least ``call_cpu_s - 1`` s (>= the host's timeout).
    def _arm_cpu(self) -> None:
        now = time.process_time()
        if now - self._armed_at < 1.0:
            return
        try:
            soft = min(self.total_cpu_s, _cpu_used() + self.call_cpu_s)
            resource.setrlimit(resource.RLIMIT_CPU, (soft, self.total_cpu_s))
            self._armed_at = now
        except (ValueError, OSError):
            pass

    def load(self, req: dict) -> dict:
        code = req.get("code")
        if not isinstance(code, str):
            return {"ok": False, "error": "TypeError: code must be a string"}
        if not self.args.unsafe_skip_policy:
            violations = check_policy(code)
            if violations:
                return {"ok": False, "error": "PolicyViolation: " + "; ".join(violations)[:MAX_ERROR_CHARS],
                        "violations": violations}
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                code_obj = compile(code, CANDIDATE_FILE, "exec", dont_inherit=True)
        except (SyntaxError, ValueError) as e:
            return {"ok": False, "error": f"{type(e).__name__}: {e}"}
        lines = code.splitlines(keepends=True)
        linecache.cache[CANDIDATE_FILE] = (len(code), None, lines, CANDIDATE_FILE)
        # A real module object, registered, so library code that looks the candidate's module
        # up (dataclasses with string annotations, enum, pickle-free typing) works.
        mod = types.ModuleType(CANDIDATE_MODULE)
        sys.modules[CANDIDATE_MODULE] = mod
        ns: dict = mod.__dict__
        ns.update({"__builtins__": self.builtins, "__file__": CANDIDATE_FILE})
        ns.update(_preamble())
        want = req.get("skill_id")
        self._arm_cpu()
        try:
            with collecting() as found:
                exec(code_obj, ns)  # noqa: S102 - this is the sandbox
            if want:
                if want not in found:
                    return {"ok": False, "error": f"LookupError: no @register_pf({want!r}) class (found {sorted(found)})",
                            "registered": sorted(found)}
                sid = want
            elif len(found) == 1:
                sid = next(iter(found))
            else:
                return {"ok": False, "error": f"LookupError: expected exactly one @register_pf class, found {sorted(found)}",
                        "registered": sorted(found)}
            cls = found[sid]
            interface = self._interface(cls)
            pf = cls()
            warn: list[str] = []
            needs = getattr(pf, "needs_teacher", False)
            if type(needs) is not bool:
                warn.append(f"needs_teacher is {type(needs).__name__}, not bool")
                needs = bool(needs)
            mf = getattr(pf, "max_fires", None)
            if mf is not None and (type(mf) is not int or mf < 0):
                warn.append(f"max_fires={mf!r} is not a non-negative int; ignored")
                mf = None
            try:
                w = watched_types(getattr(pf, "watches", None))
                watches = sorted(w) if w is not None else None
            except ValueError as e:
                warn.append(f"{e}; ignored (asked on every action type)")
                watches = None
        except BaseException as e:  # noqa: BLE001
            return _err(e)
        self.pf, self.skill_id = pf, sid
        return {"ok": True, "skill_id": sid, "class_name": cls.__name__, "needs_teacher": needs,
                "max_fires": mf, "watches": watches, "registered": sorted(found), "interface": interface,
                "warnings": warn, "log": _PRINT.take()}

    @staticmethod
    def _interface(cls: type) -> dict:
        info: dict = {"is_program_function": isinstance(cls, type) and issubclass(cls, ProgramFunction)}
        for name in ("should_activate", "intervene"):
            fn = getattr(cls, name, None)
            base = getattr(ProgramFunction, name)
            d: dict = {"defined": fn is not None, "overridden": fn is not None and fn is not base}
            try:
                sig = inspect.signature(fn)
                d["params"] = [{"name": p.name, "kind": p.kind.name,
                                "has_default": p.default is not inspect.Parameter.empty,
                                "default_is_none": p.default is None}
                               for p in sig.parameters.values()]
            except (TypeError, ValueError) as e:
                d["params"] = None
                d["error"] = str(e)
            info[name] = d
        return info

    def call(self, req: dict) -> dict:
        if self.pf is None:
            return {"ok": False, "error": "RuntimeError: no PF loaded"}
        method = req.get("method")
        ctx = req.get("ctx")
        if method not in ("should_activate", "intervene") or not isinstance(ctx, dict):
            return {"ok": False, "error": "ValueError: bad call request"}
        at, arg = req.get("action_type", ""), req.get("arg", "")
        before = {k: _snapshot(v) for k, v in ctx.items() if k[:1] == "_"}
        self._arm_cpu()
        try:
            if method == "should_activate":
                r = self.pf.should_activate(ctx, at, arg)
                rtype = type(r).__name__
                resp = {"ok": True, "result": r if type(r) is bool else bool(r), "result_type": rtype}
            else:
                r = self.pf.intervene(ctx, at, arg, None)
                resp = self._intervention(r)
        except BaseException as e:  # noqa: BLE001 - SystemExit / KeyboardInterrupt from the PF too
            resp = _err(e)
        # private ctx keys the PF changed, added or removed
        try:
            changed, deleted = {}, [k for k in before if k not in ctx]
            for k, v in list(ctx.items()):
                if type(k) is str and k[:1] == "_":
                    snap = _snapshot(v)
                    if before.get(k) != snap:
                        changed[k] = json.loads(snap[1]) if snap[0] is list else v
            resp["ctx_private"], resp["ctx_deleted"] = changed, deleted
        except BaseException as e:  # noqa: BLE001
            resp = {"ok": False, "error": f"TypeError: private ctx value cannot leave the sandbox ({e})"}
        out = _PRINT.take()
        if out:
            resp["log"] = out
        return resp

    @staticmethod
    def _intervention(r: object) -> dict:
        if not isinstance(r, Intervention):
            return {"ok": True, "result": None, "result_type": type(r).__name__}
        t = r.type
        tv = t.value if isinstance(t, InterventionType) else t
        fields = {"type": tv, "new_action_type": r.new_action_type, "new_action_arg": r.new_action_arg,
                  "context_text": r.context_text, "reason": r.reason, "skill_id": r.skill_id}
        issues = []
        for k, v in fields.items():
            if v is not None and type(v) is not str:
                issues.append(f"Intervention.{k} is {type(v).__name__}")
                fields[k] = None
        out = {"ok": True, "result": fields, "result_type": "Intervention"}
        if issues:
            out["issues"] = issues
        return out


def _parse_args(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="hasp.pf.sandbox_worker")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--memory-mb", type=int, default=int(os.environ.get("HASP_SANDBOX_MEMORY_MB", 512)))
    ap.add_argument("--call-cpu-s", type=int, default=3, help="CPU seconds one request may use (kernel-enforced)")
    ap.add_argument("--total-cpu-s", type=int, default=3600, help="CPU seconds over the worker's life")
    ap.add_argument("--nofile", type=int, default=16)
    ap.add_argument("--probe", action="store_true", help="try fork/socket/write after setup, report in hello")
    ap.add_argument("--no-netns", action="store_true")
    ap.add_argument("--no-setuid", action="store_true")
    ap.add_argument("--no-seccomp", action="store_true")
    # Test-only switches: they remove the Python-level layers so tests can show the OS layer holds.
    ap.add_argument("--unsafe-skip-policy", action="store_true")
    ap.add_argument("--unsafe-unrestricted-runtime", action="store_true")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    # The protocol gets its own fd; fd 1 (and sys.stdout) become stderr so nothing
    # a PF or the interpreter prints can corrupt the response stream.
    proto_fd = os.dup(1)
    os.dup2(2, 1)
    stdin = sys.stdin.buffer
    if args.probe or args.unsafe_unrestricted_runtime:
        # Load what a hostile PF would reach for *before* the filesystem is out of reach,
        # so probes and tests exercise the kernel-level blocks, not a missing module.
        import socket  # noqa: F401
        import subprocess  # noqa: F401
        "x".encode("idna")  # socket.create_connection needs it
        import hasp.pf.dispatcher  # noqa: F401 - so a patching attempt has a real target
    worker = Worker(args)  # builds proxies / builtins before privileges are gone
    prot = apply_protections(args)
    prot["restricted_runtime"] = worker.restricted
    prot["static_policy"] = not args.unsafe_skip_policy
    hello = {"op": "hello", "ok": True, "protections": prot, "python": platform.python_version()}
    if args.probe:
        hello["probe"] = probe_protections(args.workdir)

    def send(obj: dict) -> None:
        try:
            data = _ENC.encode(obj).encode() + b"\n"
        except BaseException as e:  # noqa: BLE001
            data = json.dumps({"ok": False, "error": f"TypeError: response not serialisable ({e})"}).encode() + b"\n"
        view = memoryview(data)
        while view:
            n = os.write(proto_fd, view)
            view = view[n:]

    send(hello)
    while True:
        line = stdin.readline()
        if not line:
            return 0
        try:
            req = json.loads(line)
            op = req.get("op")
        except (ValueError, AttributeError) as e:
            send({"ok": False, "error": f"ValueError: bad request ({e})"})
            continue
        if op == "call":
            send(worker.call(req))
        elif op == "load":
            send(worker.load(req))
        elif op == "ping":
            send({"ok": True})
        elif op == "exit":
            return 0
        else:
            send({"ok": False, "error": f"ValueError: unknown op {op!r}"})


if __name__ == "__main__":
    sys.exit(main())
