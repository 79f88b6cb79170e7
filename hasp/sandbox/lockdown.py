"""Child side: the process locks itself down before it touches untrusted code.

``apply(spec)`` runs every layer the host asked for, in this order, and returns
what each one actually achieved (each layer records why it failed under
``errors``); ``missing_layers(spec, prot)`` then names every layer that was asked
for and is not in place, and the child refuses to run anything (exit
``REFUSED_EXIT`` with one line on stderr) unless the spec carries the user's
explicit ``allow_weaker`` opt-in — then the missing layers are recorded as
``prot["weaker"]`` on every run:

network namespace (``unshare(CLONE_NEWNET)``, user+net when not root) →
rlimits (address space, CPU, file size, open files, CORE=0, NPROC=0) →
uid/gid ``nobody`` when root (root ignores RLIMIT_NPROC), optionally keeping
``O_PATH`` handles to the import roots so later imports still work →
parent-death signal → no_new_privs → not dumpable → Landlock → seccomp.

Landlock is ``"no_files"`` (a PF worker: no file at all) or ``"program"`` (a program under
test: its private directory, the standard library and the interpreter's shared libraries;
``hasp.sandbox.landlock.confine_program``). What a program may read is taken before the uid
drop, since the interpreter may sit below a directory only root can enter.

The spec is plain JSON built by ``hasp.sandbox.spawn``; nothing here imports
the rest of the project, so the child reaches this point quickly.
"""

from __future__ import annotations

import base64
import ctypes
import math
import os
import resource
import signal
import sys

from hasp.sandbox import landlock, seccomp

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38
NOBODY = 65534
#: exit status of a child that refused to run because a required layer is missing
REFUSED_EXIT = 3
REFUSED_PREFIX = "hasp sandbox refused:"


def _error(prot: dict, key: str, e: BaseException) -> None:
    prot.setdefault("errors", []).append(f"{key}: {e}")


def cpu_used() -> int:
    """CPU seconds this process has used, rounded up (RLIMIT_CPU counts whole seconds)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return int(math.ceil(ru.ru_utime + ru.ru_stime))


def _setrlimit(prot: dict, key: str, res: int, soft: int, hard: int | None = None) -> None:
    hard = soft if hard is None else hard
    try:
        resource.setrlimit(res, (soft, hard))
        prot[key] = soft if soft == hard else [soft, hard]
    except (ValueError, OSError) as e:
        prot[key] = None
        _error(prot, key, e)


def _netns(libc: ctypes.CDLL, prot: dict) -> None:
    prot["netns"] = False
    if libc.unshare(CLONE_NEWNET) == 0:
        prot["netns"] = True
        return
    err = os.strerror(ctypes.get_errno())
    if libc.unshare(CLONE_NEWUSER | CLONE_NEWNET) == 0:
        prot["netns"] = prot["userns"] = True
    else:
        _error(prot, "netns", err)


def _rlimits(lim: dict, prot: dict) -> None:
    soft, hard = lim["cpu"]
    if lim.get("cpu_from_now"):  # a long-lived worker re-arms its soft limit per request
        soft = min(hard, cpu_used() + soft)
    _setrlimit(prot, "rlimit_as", resource.RLIMIT_AS, lim["as"])
    _setrlimit(prot, "rlimit_cpu", resource.RLIMIT_CPU, soft, hard)
    _setrlimit(prot, "rlimit_fsize", resource.RLIMIT_FSIZE, lim["fsize"])
    _setrlimit(prot, "rlimit_core", resource.RLIMIT_CORE, 0)
    _setrlimit(prot, "rlimit_nofile", resource.RLIMIT_NOFILE, lim["nofile"])
    _setrlimit(prot, "rlimit_nproc", resource.RLIMIT_NPROC, 0)


def _import_roots() -> dict[str, int]:
    """``O_PATH`` handles to the import roots: the interpreter's files may sit below a
    directory only root can traverse (e.g. /root/.pyenv); after the uid drop the child
    imports through /proc/self/fd/N (the kernel lets a process follow its own fds)."""
    roots: dict[str, int] = {}
    for p in sys.path:
        if p and p not in roots and os.path.isdir(p):
            try:
                roots[p] = os.open(p, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                pass
    return roots


def _remap_imports(roots: dict[str, int]) -> None:
    by_len = sorted(roots, key=len, reverse=True)

    def remap(path: str) -> str:
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


def _drop_uid(spec: dict, prot: dict) -> None:
    was_root = os.geteuid() == 0
    want = was_root and spec.get("setuid") and not prot.get("userns")
    roots = _import_roots() if want and spec.get("import_roots_via_fd") else {}
    if want:
        try:
            os.setgroups([])
            os.setresgid(NOBODY, NOBODY, NOBODY)
            os.setresuid(NOBODY, NOBODY, NOBODY)
        except OSError as e:
            _error(prot, "setuid", e)
    prot["uid"] = os.geteuid()
    prot["uid_dropped"] = was_root and prot["uid"] != 0
    prot["unprivileged"] = prot["uid"] != 0
    # Inside a user namespace the uid we see is a mapped one; to the kernel (files, signals)
    # the process is still the host user, so only a real setuid counts as another identity.
    host = spec.get("host_uid")
    prot["identity_distinct"] = (not prot.get("userns") and prot["uid"] != 0
                                 and (host is None or prot["uid"] != host))
    if roots and prot["uid_dropped"]:
        _remap_imports(roots)
        prot["import_roots_via_fd"] = len(roots)


def _seccomp(spec: dict, prot: dict) -> None:
    prot["seccomp"] = False
    progs = spec.get("seccomp")
    if not progs:
        return
    key = "with_landlock" if prot.get("landlock") and progs.get("with_landlock") else "default"
    try:
        seccomp.install(base64.b64decode(progs[key]))
        prot["seccomp"] = progs.get(f"{key}_profile", True)
    except (OSError, ValueError) as e:
        _error(prot, "seccomp", e)


def _errors_of(prot: dict, key: str) -> str:
    errs = [e.split(": ", 1)[1] for e in prot.get("errors", []) if e.startswith(key + ":")]
    return f" ({'; '.join(errs)})" if errs else ""


def missing_layers(spec: dict, prot: dict) -> list[str]:
    """The layers ``spec`` asked for that ``prot`` says are not in place, one phrase each."""
    out: list[str] = []
    if spec.get("netns") and not prot.get("netns"):
        out.append("network namespace" + _errors_of(prot, "netns"))
    for key in ("rlimit_as", "rlimit_cpu", "rlimit_fsize", "rlimit_core", "rlimit_nofile", "rlimit_nproc"):
        if prot.get(key) is None:
            out.append(key.replace("_", " ") + _errors_of(prot, key))
    if spec.get("setuid") and not prot.get("identity_distinct"):
        why = ("a user namespace only maps the id; the kernel still sees the host user"
               if prot.get("userns") else f"uid {prot.get('uid')}")
        out.append(f"an identity other than the host user's ({why})" + _errors_of(prot, "setuid"))
    if not prot.get("no_new_privs"):
        out.append("no_new_privs")
    if spec.get("pdeathsig") and not prot.get("pdeathsig"):
        out.append("parent-death signal")
    if spec.get("landlock") and not prot.get("landlock"):
        out.append("landlock" + _errors_of(prot, "landlock"))
    if spec.get("require_seccomp") and not prot.get("seccomp"):
        out.append("seccomp filter" + (_errors_of(prot, "seccomp") or " (no filter for this machine)"))
    return out


def refusal_line(missing: list[str]) -> str:
    """The one line a refusal prints (and the host raises)."""
    return (f"{REFUSED_PREFIX} required isolation layer(s) could not be installed: {'; '.join(missing)}. "
            "Untrusted code was not run (set sandbox.allow_weaker: true to run it anyway, recorded)")


def apply(spec: dict) -> dict:
    """Lock the calling process down as ``spec`` says; returns the achieved protections."""
    prot: dict = {"pid": os.getpid(), "workdir": spec.get("workdir")}
    libc = ctypes.CDLL(None, use_errno=True)
    if spec.get("netns"):
        _netns(libc, prot)
    else:
        prot["netns"] = False
    plan = None
    if spec.get("landlock") == "program":  # taken as root: the stdlib may sit below /root
        try:
            plan = landlock.read_plan()
        except OSError as e:
            _error(prot, "landlock", e)
    _rlimits(spec["rlimits"], prot)
    _drop_uid(spec, prot)
    if spec.get("pdeathsig"):
        prot["pdeathsig"] = libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    prot["no_new_privs"] = libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0
    prot["not_dumpable"] = libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    prot["landlock"] = False
    if spec.get("landlock") == "no_files":
        try:
            prot["landlock"] = landlock.deny_all_files(prot)
        except OSError as e:
            _error(prot, "landlock", e)
    elif plan is not None:
        try:
            prot["landlock"] = landlock.confine_program(spec["workdir"], plan, prot)
        except OSError as e:
            _error(prot, "landlock", e)
    _seccomp(spec, prot)
    return prot
