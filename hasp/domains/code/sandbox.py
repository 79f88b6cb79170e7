"""Run untrusted candidate code against its tests in a locked-down child process.

``run_tests(solution_code, item)`` starts ``python -I -B -c <driver>`` and sends it
the program over stdin. The driver (the string ``_DRIVER`` below; it imports
nothing from the project, so a run costs one bare interpreter start) reads its
job, locks itself down, executes the candidate, then the tests, and reports a
verdict tagged with a per-run nonce on a private file descriptor. A process that
exits without that report (``os._exit(0)`` / ``sys.exit`` tricks, crashes) never
counts as passed.

Layers (each fails soft and is reported in ``TestResult.protections``):

host side
  * own session / process group (``start_new_session``); the wall-clock timeout
    SIGKILLs the whole group, and the group is killed after every run anyway;
  * a fresh private temp dir as cwd (and HOME/TMPDIR), removed afterwards;
  * minimal environment; ``-I`` ignores PYTHON* variables and the user site.

child side, in this order
  * network namespace (``unshare(CLONE_NEWNET)``; user+net namespace when not
    root) – no interface but a down loopback;
  * rlimits: address space (``memory_mb``), CPU seconds (timeout + 1, so the
    kernel stops a runaway even if the host is gone), FSIZE, NOFILE, CORE=0 and
    NPROC=0;
  * drop to uid/gid ``nobody`` when started as root (root ignores RLIMIT_NPROC);
    parent-death signal; no_new_privs; not dumpable;
  * Landlock (when the kernel has it): file writes, creation, removal and
    renames only beneath the temp dir (plus ``/dev/null``); TCP bind/connect
    denied (ABI >= 4); signals and abstract unix sockets scoped to the sandbox
    (ABI >= 6);
  * seccomp filter (x86_64): no fork/clone/exec, no sockets, no kill/ptrace/
    mount/namespaces/bpf/...; without Landlock it also refuses every open for
    writing and every file-system modification (then even the temp dir is
    read-only).

The syscall table, the prctl constants and the nobody uid are those of the PF
sandbox (``hasp.pf.sandbox_worker``); the filter program is assembled here on
the host with a code-specific deny set and sent to the child as bytes.

Threads and subprocesses are not available to candidate code (NPROC=0, no clone).
Verdict statuses: ``passed``; ``failed`` (an assertion or an exception while the
tests ran); ``error`` (syntax error, the module raised while being defined, the
entry point is missing, or the process ended without a verdict); ``timeout``
(wall clock); ``killed`` (a resource limit: MemoryError under the address-space
cap, CPU seconds, file size, or a crash signal).

Not a defence against code that deliberately attacks the grader from inside the
same interpreter (monkeypatching the test helpers, reading the nonce out of the
driver's memory): that needs the tests in a separate process and is out of scope
for benchmark grading; the OS layers above are what protect the host.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import os
import platform
import secrets
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

from hasp.pf import sandbox_worker as _sw

if TYPE_CHECKING:
    from hasp.domains.code.datasets import CodeItem

Status = Literal["passed", "failed", "timeout", "error", "killed"]
STATUSES: tuple[str, ...] = ("passed", "failed", "timeout", "error", "killed")

MAX_DETAIL_CHARS = 2000
OUTPUT_TAIL_BYTES = 4000

# Landlock (syscall numbers are the same on every architecture; rights from <linux/landlock.h>)
_NR_LANDLOCK_CREATE, _NR_LANDLOCK_ADD_RULE, _NR_LANDLOCK_RESTRICT = 444, 445, 446
_LL_FS_WRITE_RIGHTS = {  # right -> first ABI that knows it
    1 << 1: 1,   # WRITE_FILE
    1 << 4: 1,   # REMOVE_DIR
    1 << 5: 1,   # REMOVE_FILE
    1 << 6: 1,   # MAKE_CHAR
    1 << 7: 1,   # MAKE_DIR
    1 << 8: 1,   # MAKE_REG
    1 << 9: 1,   # MAKE_SOCK
    1 << 10: 1,  # MAKE_FIFO
    1 << 11: 1,  # MAKE_BLOCK
    1 << 12: 1,  # MAKE_SYM
    1 << 13: 2,  # REFER (cross-directory rename/link)
    1 << 14: 3,  # TRUNCATE
}
_LL_FS_EXECUTE = 1 << 0
_LL_FS_DEVNULL_RIGHTS = (1 << 1) | (1 << 14)   # WRITE_FILE | TRUNCATE on /dev/null
_LL_FS_DIR_DEVICE_RIGHTS = (1 << 6) | (1 << 11)  # no device nodes even in the temp dir
_LL_NET_TCP = (1 << 0) | (1 << 1)              # BIND_TCP | CONNECT_TCP (ABI 4)
_LL_SCOPES = (1 << 0) | (1 << 1)               # ABSTRACT_UNIX_SOCKET | SIGNAL (ABI 6)

# Syscalls the candidate never gets (names from the PF sandbox's table).
_DENY_ALWAYS = (
    "socket", "connect", "accept", "bind", "listen", "socketpair", "accept4",
    "clone", "fork", "vfork", "clone3", "execve", "execveat",
    "kill", "ptrace", "process_vm_readv", "process_vm_writev",
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns",
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "keyctl", "add_key", "request_key", "init_module", "finit_module", "delete_module",
    "kexec_load", "kexec_file_load", "reboot", "open_by_handle_at", "name_to_handle_at",
    "personality", "memfd_create", "pidfd_open", "pidfd_send_signal", "pidfd_getfd",
    "setsid", "setpgid", "setpriority", "sched_setaffinity",
    "chmod", "fchmod", "fchmodat", "chown", "fchown", "lchown", "fchownat", "mknod", "mknodat",
    "openat2",
)
# Denied as well when Landlock is not there to confine them to the temp dir.
_DENY_WITHOUT_LANDLOCK = (
    "creat", "link", "symlink", "linkat", "symlinkat", "rename", "renameat", "renameat2",
    "unlink", "unlinkat", "mkdir", "mkdirat", "rmdir", "truncate", "ftruncate",
)
_EXTRA_NRS = {"tkill": 200}  # not in the PF sandbox table; tkill has no legitimate use here


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


def pass_at_1(results: Iterable[TestResult | bool]) -> float:
    """Fraction of problems solved with one sample each (0.0 for no results)."""
    vals = [r.passed if isinstance(r, TestResult) else bool(r) for r in results]
    return sum(vals) / len(vals) if vals else 0.0


# ---------------------------------------------------------------------------- seccomp program

def build_seccomp_filter(*, deny_file_writes: bool) -> bytes:
    """Assemble the classic-BPF seccomp program for candidate code (x86_64).

    Denied syscalls return EPERM; a foreign architecture is killed; ``prlimit64``
    works only on the process itself; with ``deny_file_writes`` ``open``/``openat``
    fail when asked for any write/create/truncate flag."""
    table = {**_sw._DENY_X86_64, **_EXTRA_NRS}
    names = _DENY_ALWAYS + (_DENY_WITHOUT_LANDLOCK if deny_file_writes else ())
    deny = sorted({table[n] for n in names})
    LD, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
    ALLOW, EPERM, KILL = 0x7FFF0000, 0x00050000 | 1, 0x80000000
    prog: list[tuple] = [
        (LD, 0, 0, 4),                                     # seccomp_data.arch
        ("j", JEQ, _sw.AUDIT_ARCH_X86_64, "next", "kill"),
        (LD, 0, 0, 0),                                     # seccomp_data.nr
        ("j", JGE, 0x40000000, "deny", "next"),            # x32 ABI aliases
    ]
    prog += [("j", JEQ, nr, "deny", "next") for nr in deny]
    if deny_file_writes:
        prog += [("j", JEQ, _sw._NR_OPEN, "open", "next"), ("j", JEQ, _sw._NR_OPENAT, "openat", "next")]
    prog += [("j", JEQ, _sw._NR_PRLIMIT64, "prlimit", "next"), (RET, 0, 0, ALLOW)]
    labels: dict[str, int] = {}
    if deny_file_writes:
        labels["open"] = len(prog)
        prog += [(LD, 0, 0, 16 + 8), ("j", JSET, _sw._OPEN_WRITE_MASK, "deny", "allow")]       # args[1]
        labels["openat"] = len(prog)
        prog += [(LD, 0, 0, 16 + 16), ("j", JSET, _sw._OPEN_WRITE_MASK, "deny", "allow")]      # args[2]
    labels["prlimit"] = len(prog)
    prog += [(LD, 0, 0, 16), ("j", JEQ, 0, "allow", "deny")]                                   # args[0] == 0
    labels["allow"] = len(prog)
    prog.append((RET, 0, 0, ALLOW))
    labels["deny"] = len(prog)
    prog.append((RET, 0, 0, EPERM))
    labels["kill"] = len(prog)
    prog.append((RET, 0, 0, KILL))
    out = bytearray()
    for i, ins in enumerate(prog):
        if ins[0] == "j":
            _, code, k, t, f = ins
            jt, jf = (0 if lbl == "next" else labels[lbl] - i - 1 for lbl in (t, f))
            if not (0 <= jt <= 255 and 0 <= jf <= 255):
                raise ValueError("BPF jump out of range")
            out += struct.pack("HBBI", code, jt, jf, k)
        else:
            out += struct.pack("HBBI", *ins)
    return bytes(out)


@lru_cache(maxsize=2)
def _filter_b64(deny_file_writes: bool) -> str:
    return base64.b64encode(build_seccomp_filter(deny_file_writes=deny_file_writes)).decode()


# ---------------------------------------------------------------------------- the child driver

_DRIVER = r'''
import os, sys
def _hasp_driver():
    import builtins, json, resource, traceback, ctypes, base64, linecache
    job = json.loads(sys.stdin.buffer.read())
    fd = os.open(os.devnull, os.O_RDONLY)
    os.dup2(fd, 0)
    os.close(fd)
    res_fd, nonce, c = job["result_fd"], job["nonce"], job["const"]
    write, dumps, exit_now = os.write, json.dumps, os._exit
    prot = {"errors": []}
    errs = prot["errors"]
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long

    def report(status, detail):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        msg = dumps({"nonce": nonce, "status": status, "detail": str(detail)[:4000], "protections": prot})
        data = ("\n" + msg + "\n").encode("utf-8", "replace")
        while data:
            data = data[write(res_fd, data):]
        exit_now(0)

    def fail_soft(name, fn):
        try:
            r = fn()
            prot[name] = True if r is None else r
        except Exception as e:  # noqa
            prot[name] = False
            errs.append(f"{name}: {type(e).__name__}: {e}")

    def errno_fail(what):
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")

    # -- network namespace
    def netns():
        if not job["netns"]:
            return False
        if libc.unshare(c["CLONE_NEWNET"]) == 0:
            return "netns"
        if libc.unshare(c["CLONE_NEWUSER"] | c["CLONE_NEWNET"]) == 0:
            prot["userns"] = True
            return "userns+netns"
        errno_fail("unshare")
    fail_soft("netns", netns)

    # -- resource limits
    lim = job["limits"]
    for key, res, soft, hard in (
        ("rlimit_as", resource.RLIMIT_AS, lim["as"], lim["as"]),
        ("rlimit_cpu", resource.RLIMIT_CPU, lim["cpu"], lim["cpu"] + 1),
        ("rlimit_fsize", resource.RLIMIT_FSIZE, lim["fsize"], lim["fsize"]),
        ("rlimit_nofile", resource.RLIMIT_NOFILE, lim["nofile"], lim["nofile"]),
        ("rlimit_core", resource.RLIMIT_CORE, 0, 0),
        ("rlimit_nproc", resource.RLIMIT_NPROC, 0, 0),
    ):
        fail_soft(key, lambda res=res, soft=soft, hard=hard: resource.setrlimit(res, (soft, hard)) or soft)

    # -- unprivileged uid (root ignores RLIMIT_NPROC and may write anywhere)
    def drop_uid():
        if os.geteuid() != 0 or prot.get("userns") or not job["setuid"]:
            return os.geteuid()
        nobody = c["NOBODY"]
        os.setgroups([])
        os.setresgid(nobody, nobody, nobody)
        os.setresuid(nobody, nobody, nobody)
        return os.geteuid()
    # The interpreter's own files may sit below a directory only root can traverse
    # (e.g. /root/.pyenv): keep O_PATH handles to the import roots and, once the uid is
    # dropped, import through /proc/self/fd/N (the kernel lets a process follow its own fds).
    roots = {}
    if os.geteuid() == 0 and job["setuid"]:
        for p in sys.path:
            if p and p not in roots and os.path.isdir(p):
                try:
                    roots[p] = os.open(p, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                except OSError:
                    pass
    was_root = os.geteuid() == 0
    fail_soft("uid", drop_uid)
    prot["uid"] = os.geteuid()
    prot["uid_dropped"] = was_root and prot["uid"] != 0
    prot["unprivileged"] = prot["uid"] != 0
    if roots and prot["uid_dropped"]:
        by_len = sorted(roots, key=len, reverse=True)

        def remap(path):
            for r in by_len:
                if path == r or path.startswith(r + "/"):
                    return f"/proc/self/fd/{roots[r]}" + path[len(r):]
            return path
        sys.path[:] = [remap(p) for p in sys.path]
        for mod in list(sys.modules.values()):
            pth = getattr(mod, "__path__", None)
            if isinstance(pth, list):
                pth[:] = [remap(p) if isinstance(p, str) else p for p in pth]
        sys.path_importer_cache.clear()
        prot["import_roots_via_fd"] = len(roots)
    prot["pdeathsig"] = libc.prctl(c["PR_SET_PDEATHSIG"], c["SIGKILL"], 0, 0, 0) == 0
    prot["no_new_privs"] = libc.prctl(c["PR_SET_NO_NEW_PRIVS"], 1, 0, 0, 0) == 0
    prot["not_dumpable"] = libc.prctl(c["PR_SET_DUMPABLE"], 0, 0, 0, 0) == 0

    # -- Landlock: writes only beneath the work dir
    def landlock():
        if not job["landlock"]:
            return False
        u64, i32 = ctypes.c_uint64, ctypes.c_int32
        abi = libc.syscall(c["NR_LL_CREATE"], None, ctypes.c_size_t(0), ctypes.c_uint32(1))
        if abi < 1:
            errno_fail("landlock unsupported")
        fs = 0
        for right, since in job["ll_fs"]:
            if abi >= since:
                fs |= right
        fs |= c["LL_EXEC"]
        class Attr(ctypes.Structure):
            _fields_ = [("fs", u64), ("net", u64), ("scoped", u64)]
        class Beneath(ctypes.Structure):
            _pack_ = 1
            _fields_ = [("allowed", u64), ("parent_fd", i32)]
        attr = Attr(fs, c["LL_NET"] if abi >= 4 else 0, c["LL_SCOPES"] if abi >= 6 else 0)
        size = 8 if abi < 4 else 16 if abi < 6 else 24
        rfd = libc.syscall(c["NR_LL_CREATE"], ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
        if rfd < 0:
            errno_fail("landlock_create_ruleset")
        try:
            for path, rights in ((job["workdir"], fs & ~c["LL_EXEC"] & ~c["LL_DEVICES"]),
                                 (os.devnull, fs & c["LL_DEVNULL"])):
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                try:
                    rule = Beneath(rights, pfd)
                    ok = libc.syscall(c["NR_LL_ADD_RULE"], ctypes.c_int(rfd), ctypes.c_int(1),  # PATH_BENEATH
                                      ctypes.byref(rule), ctypes.c_uint32(0))
                    if ok != 0:
                        errno_fail(f"landlock_add_rule({path})")
                finally:
                    os.close(pfd)
            if libc.syscall(c["NR_LL_RESTRICT"], ctypes.c_int(rfd), ctypes.c_uint32(0)) != 0:
                errno_fail("landlock_restrict_self")
        finally:
            os.close(rfd)
        prot["landlock_net"] = abi >= 4
        prot["landlock_scoped"] = abi >= 6
        return abi
    fail_soft("landlock", landlock)

    # -- seccomp
    def seccomp():
        if not job["seccomp"]:
            return False
        prog = base64.b64decode(job["bpf_landlock"] if prot.get("landlock") else job["bpf_strict"])
        class Fprog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
        buf = ctypes.create_string_buffer(prog, len(prog))
        fp = Fprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
        if libc.prctl(c["PR_SET_SECCOMP"], c["SECCOMP_MODE_FILTER"], ctypes.byref(fp), 0, 0) != 0:
            errno_fail("seccomp")
        return "writes confined by landlock" if prot.get("landlock") else "no file writes"
    fail_soft("seccomp", seccomp)
    if not errs:
        del prot["errors"]
    if job.get("probe"):
        report("passed", "probe")

    # -- run the candidate, then the tests
    entry = job["entry_point"]
    g = {"__name__": "__solution__", "__builtins__": builtins}

    def where(tb, fname):
        frames = [f for f in traceback.extract_tb(tb) if f.filename == fname]
        if not frames:
            return ""
        f = frames[-1]
        return f" [{fname[1:-1]} line {f.lineno}: {(f.line or '').strip()[:300]}]"

    def exc_text(e, tb):
        try:
            msg = str(e)
        except BaseException:
            msg = "<unprintable>"
        return f"{type(e).__name__}: {msg[:1500]}" if msg else type(e).__name__

    for fname, src in (("<solution>", job["solution"]), ("<tests>", job["tests"])):
        linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
    try:
        code = compile(job["solution"], "<solution>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        line = f" (line {e.lineno}: {(e.text or '').strip()[:200]})" if isinstance(e, SyntaxError) and e.lineno else ""
        report("error", f"{type(e).__name__}: {getattr(e, 'msg', e)}{line}")
    try:
        tests = compile(job["tests"], "<tests>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as e:
        report("error", f"the tests do not compile: {type(e).__name__}: {e}")
    try:
        exec(code, g)
    except MemoryError:
        report("killed", "memory limit: MemoryError while defining the solution")
    except OSError as e:
        if e.errno == 27:  # EFBIG: RLIMIT_FSIZE (Python ignores SIGXFSZ)
            report("killed", "file size limit: " + exc_text(e, None))
        report("error", "the solution raised while being defined: " + exc_text(e, e.__traceback__)
               + where(e.__traceback__, "<solution>"))
    except BaseException as e:
        report("error", "the solution raised while being defined: " + exc_text(e, e.__traceback__)
               + where(e.__traceback__, "<solution>"))
    if entry and entry not in g:
        defined = sorted(k for k, v in g.items() if callable(v) and not k.startswith("__"))[:10]
        report("error", f"the solution does not define {entry!r} (defines: {', '.join(defined) or 'nothing callable'})")
    try:
        exec(tests, g)
    except MemoryError:
        report("killed", "memory limit: MemoryError while the tests ran")
    except AssertionError as e:
        tb = e.__traceback__
        try:
            msg = str(e)
        except BaseException:
            msg = ""
        report("failed", f"assertion failed: {msg[:1500]}" if msg else "assertion failed" + where(tb, "<tests>"))
    except BaseException as e:
        tb = e.__traceback__
        if isinstance(e, OSError) and e.errno == 27:
            report("killed", "file size limit: " + exc_text(e, tb))
        report("failed", exc_text(e, tb) + where(tb, "<solution>") + where(tb, "<tests>"))
    report("passed", "all tests passed")

_hasp_driver()
'''


# ---------------------------------------------------------------------------- host side

@lru_cache(maxsize=1)
def _landlock_abi() -> int:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        return int(libc.syscall(_NR_LANDLOCK_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))
    except (OSError, AttributeError):
        return -1


def _rmtree(path: str) -> None:
    def onerror(func: Callable[..., Any], p: str, _exc: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(p) or p, 0o700)
            os.chmod(p, 0o700)
            func(p)

    shutil.rmtree(path, onerror=onerror)
    if os.path.exists(path):
        shutil.rmtree(path, ignore_errors=True)


def _read_tail(f: Any, limit: int) -> str:
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


def run_program(solution_code: str, tests: str, entry_point: str = "", *, timeout_s: float = 10.0,
                memory_mb: int = 512, fsize_mb: int = 16, nofile: int = 64, netns: bool = True,
                landlock: bool = True, seccomp: bool = True, setuid: bool = True,
                python: str | None = None, _probe: bool = False) -> TestResult:
    """Execute ``solution_code`` then ``tests`` (same namespace) in the sandbox.

    ``entry_point`` (optional) must be defined by the solution. The switches turn
    single layers off (for tests that show the other layers hold); keep the defaults."""
    t0 = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix="hasp_code_")
    nonce = secrets.token_hex(16)
    cpu_s = max(1, math.ceil(timeout_s) + 1)
    is_root = os.geteuid() == 0
    if is_root and setuid:
        os.chown(workdir, _sw.NOBODY, _sw.NOBODY)
    os.chmod(workdir, 0o700)
    job = {
        "solution": solution_code, "tests": tests, "entry_point": entry_point, "nonce": nonce,
        "workdir": workdir, "netns": netns, "landlock": landlock and _landlock_abi() >= 1,
        "seccomp": seccomp and platform.machine() == "x86_64", "setuid": setuid, "probe": _probe,
        "bpf_landlock": _filter_b64(False), "bpf_strict": _filter_b64(True),
        "limits": {"as": memory_mb * 1024 * 1024, "cpu": cpu_s, "fsize": fsize_mb * 1024 * 1024,
                   "nofile": nofile},
        "ll_fs": sorted(_LL_FS_WRITE_RIGHTS.items()),
        "const": {"CLONE_NEWNET": _sw.CLONE_NEWNET, "CLONE_NEWUSER": _sw.CLONE_NEWUSER,
                  "NOBODY": _sw.NOBODY, "PR_SET_NO_NEW_PRIVS": _sw.PR_SET_NO_NEW_PRIVS,
                  "PR_SET_DUMPABLE": _sw.PR_SET_DUMPABLE, "PR_SET_SECCOMP": _sw.PR_SET_SECCOMP,
                  "SECCOMP_MODE_FILTER": _sw.SECCOMP_MODE_FILTER, "LL_EXEC": _LL_FS_EXECUTE,
                  "LL_DEVNULL": _LL_FS_DEVNULL_RIGHTS, "LL_DEVICES": _LL_FS_DIR_DEVICE_RIGHTS,
                  "LL_NET": _LL_NET_TCP, "LL_SCOPES": _LL_SCOPES, "NR_LL_CREATE": _NR_LANDLOCK_CREATE,
                  "NR_LL_ADD_RULE": _NR_LANDLOCK_ADD_RULE, "NR_LL_RESTRICT": _NR_LANDLOCK_RESTRICT,
                  "PR_SET_PDEATHSIG": 1, "SIGKILL": int(signal.SIGKILL)},
    }
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": workdir,
           "TMPDIR": workdir}
    timed_out = False
    rc: int | None = None
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as res:
        job["result_fd"] = res.fileno()
        payload = json.dumps(job).encode()
        try:
            proc = subprocess.Popen(
                [python or sys.executable, "-I", "-B", "-c", _DRIVER], stdin=subprocess.PIPE,
                stdout=out, stderr=subprocess.STDOUT, cwd=workdir, env=env, start_new_session=True,
                close_fds=True, pass_fds=(res.fileno(),))
        except OSError as e:
            _rmtree(workdir)
            return TestResult(False, "error", f"cannot start the sandbox: {e}", time.perf_counter() - t0)
        try:
            try:
                proc.communicate(payload, timeout=timeout_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            except (BrokenPipeError, OSError):
                pass  # died before reading its job; rc tells why
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                if proc.stdin is not None:
                    proc.stdin.close()
            try:
                rc = proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover - unkillable?
                rc = None
        elapsed = time.perf_counter() - t0
        output = _read_tail(out, OUTPUT_TAIL_BYTES)
        verdict = _parse_verdict(_read_tail(res, 64 * 1024), nonce)
    _rmtree(workdir)

    if timed_out and verdict is None:
        return TestResult(False, "timeout", f"wall-clock timeout after {timeout_s:g}s; process group killed",
                          elapsed, output=output)
    if verdict is not None:
        status = verdict["status"]
        return TestResult(status == "passed", status, str(verdict.get("detail", ""))[:MAX_DETAIL_CHARS],
                          elapsed, protections=verdict.get("protections") or {}, output=output)
    if rc is not None and rc < 0:
        sig = -rc
        why = {signal.SIGXCPU: "CPU time limit", signal.SIGKILL: "killed (CPU hard limit)",
               signal.SIGXFSZ: "file size limit", signal.SIGSYS: "forbidden system call",
               signal.SIGSEGV: "crashed (segmentation fault; deep recursion?)"}.get(sig, "crashed")
        return TestResult(False, "killed", f"{why}: {_signal_name(sig)}", elapsed, output=output)
    tail = output.strip()[-500:]
    return TestResult(False, "error", f"the process exited (code {rc}) before the tests finished"
                      + (f"; output tail:\n{tail}" if tail else ""), elapsed, output=output)


def run_tests(solution_code: str, item: CodeItem, *, timeout_s: float = 10.0, memory_mb: int = 512,
              **kw: Any) -> TestResult:
    """Run ``item.tests`` against a complete program ``solution_code`` in the sandbox."""
    return run_program(solution_code, item.tests, item.entry_point, timeout_s=timeout_s,
                       memory_mb=memory_mb, **kw)


def run_many(jobs: Sequence[tuple[str, CodeItem]], *, workers: int = 2, **kw: Any) -> list[TestResult]:
    """``run_tests`` over (solution, item) pairs with bounded parallelism, in input order."""
    if workers <= 1 or len(jobs) <= 1:
        return [run_tests(s, it, **kw) for s, it in jobs]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hasp-code-sbx") as ex:
        return list(ex.map(lambda j: run_tests(j[0], j[1], **kw), jobs))


def probe_protections(**kw: Any) -> dict[str, Any]:
    """The protections a sandboxed run actually gets on this machine (one empty run)."""
    return run_program("", "", _probe=True, **kw).protections
