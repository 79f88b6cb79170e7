"""Host side: start a sandboxed child and clean up after it.

Everything about how an untrusted child is started lives here: a private temp
dir (owned by ``nobody`` when the host is root) as cwd, HOME and TMPDIR; a
minimal environment; ``python -I -B`` so PYTHON* variables and the user site
are ignored; its own session, so the whole process group can be killed; the
lockdown spec (``lockdown_spec``) and the driver's job sent as the first line
on stdin. The child (``hasp/sandbox/child.py``, run by path so it imports this
very tree) locks itself down and then hands over to the driver module.

A child's directory is named after the process that made it (``<prefix>pid<N>-<random>``): a run
killed with SIGKILL cannot remove it, so the first directory a later process makes sweeps those
whose owner is dead, and says how many it removed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

from hasp.processes import pid_alive
from hasp.sandbox import seccomp
from hasp.sandbox.lockdown import NOBODY

log = logging.getLogger(__name__)

_SWEPT: set[tuple[str, str]] = set()
_SWEEP_LOCK = threading.Lock()

CHILD_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py")


def _b64(profile: seccomp.Profile) -> str:
    return base64.b64encode(seccomp.build(profile)).decode()


def lockdown_spec(workdir: str, *, memory_mb: int, cpu_s: tuple[int, int], fsize_bytes: int, nofile: int,
                  cpu_from_now: bool = False, netns: bool = True, setuid: bool = True,
                  landlock: str | bool = False, pdeathsig: bool = False, import_roots_via_fd: bool = False,
                  seccomp_profile: seccomp.Profile | None = None,
                  seccomp_with_landlock: seccomp.Profile | None = None,
                  allow_weaker: bool = False) -> dict[str, Any]:
    """The JSON the child's ``lockdown.apply`` reads. A layer left out is not applied;
    ``seccomp_with_landlock`` replaces ``seccomp_profile`` once Landlock is active. Every
    layer asked for is required: the child refuses to run when one cannot be installed,
    unless ``allow_weaker`` (the user's explicit opt-in), which the child then records.
    ``landlock`` is ``"no_files"`` (a PF worker) or ``"program"`` (a program under test and its
    checker); see ``hasp.sandbox.lockdown``."""
    spec: dict[str, Any] = {
        "host_uid": os.getuid(), "allow_weaker": bool(allow_weaker),
        "require_seccomp": seccomp_profile is not None,
        "workdir": workdir, "netns": netns, "setuid": setuid, "landlock": landlock,
        "pdeathsig": pdeathsig, "import_roots_via_fd": import_roots_via_fd,
        "rlimits": {"as": memory_mb * 1024 * 1024, "cpu": list(cpu_s), "cpu_from_now": cpu_from_now,
                    "fsize": fsize_bytes, "nofile": nofile},
        "seccomp": None,
    }
    if seccomp_profile is not None and seccomp.supported():
        progs = {"default": _b64(seccomp_profile), "default_profile": seccomp_profile.name}
        if seccomp_with_landlock is not None:
            progs.update(with_landlock=_b64(seccomp_with_landlock),
                         with_landlock_profile=seccomp_with_landlock.name)
        spec["seccomp"] = progs
    return spec


def make_workdir(prefix: str, *, setuid: bool = True) -> str:
    """A fresh private directory the child (possibly as ``nobody``) may use, named after this
    process; the first one of a process sweeps those of dead processes (``sweep_stale_workdirs``)."""
    key = (prefix, tempfile.gettempdir())
    with _SWEEP_LOCK:
        if key not in _SWEPT:
            _SWEPT.add(key)
            sweep_stale_workdirs(prefix)
    path = tempfile.mkdtemp(prefix=f"{prefix}pid{os.getpid()}-")
    if os.geteuid() == 0 and setuid:
        os.chown(path, NOBODY, NOBODY)
    os.chmod(path, 0o700)
    return path


#: the folder prefixes of sandboxed children (PF workers, code-test programs)
WORKDIR_PREFIXES = ("hasp_sbx_", "hasp_code_")


def sweep_at_start() -> int:
    """Sweep every kind of sandbox folder of killed processes once, when a command starts (a run
    served wholly from the cache never makes a folder of its own, so it would not sweep); one
    log line with the count."""
    gone = 0
    with _SWEEP_LOCK:
        for prefix in WORKDIR_PREFIXES:
            key = (prefix, tempfile.gettempdir())
            if key not in _SWEPT:
                _SWEPT.add(key)
                gone += _sweep(prefix, tempfile.gettempdir())
    _report(gone, os.path.join(tempfile.gettempdir(), "hasp_*"))
    return gone


def sweep_stale_workdirs(prefix: str, root: str | None = None) -> int:
    """Remove the ``prefix`` directories under ``root`` (default: the temp dir) whose owning process
    no longer runs; a directory of a live process, or of one this user may not signal, is kept.
    Logs one line with the count when it removed any; returns the count."""
    root = root or tempfile.gettempdir()
    gone = _sweep(prefix, root)
    _report(gone, os.path.join(root, prefix + "*"))
    return gone


def _sweep(prefix: str, root: str) -> int:
    owner = re.compile(re.escape(prefix) + r"pid(\d+)-")
    gone = 0
    try:
        names = os.listdir(root)
    except OSError:
        return 0
    for name in names:
        m = owner.match(name)
        if not m or pid_alive(int(m.group(1))):
            continue
        path = os.path.join(root, name)
        remove_workdir(path)
        gone += not os.path.exists(path)
    return gone


def _report(gone: int, where: str) -> None:
    if gone:
        log.warning("removed %d sandbox folder(s) %s left by processes that were killed", gone, where)


def remove_workdir(path: str | None) -> None:
    """Remove a child's directory even if the child made parts of it unwritable."""
    if not path:
        return

    def onerror(func: Callable[..., Any], p: str, _exc: Any) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(p) or p, 0o700)
            os.chmod(p, 0o700)
            func(p)

    shutil.rmtree(path, onerror=onerror)
    if os.path.exists(path):
        shutil.rmtree(path, ignore_errors=True)


def first_line(lockdown: dict[str, Any], job: dict[str, Any]) -> bytes:
    """The setup message the child reads before anything else."""
    return json.dumps({"lockdown": lockdown, "job": job}).encode() + b"\n"


def start(driver: str, workdir: str, *, python: str | None = None, stdout: int | IO[Any] = subprocess.PIPE,
          stderr: int | IO[Any] = subprocess.PIPE, pass_fds: tuple[int, ...] = (),
          bufsize: int = -1, hash_seed: int | None = None) -> subprocess.Popen[bytes]:
    """Start ``child.py <driver>`` in its own session (raises OSError).

    ``hash_seed`` gives children that compare each other's values (the program under test and
    its checker) one string-hash order, so a set both build iterates alike; ``-I`` would ignore
    it, so those start with ``-s`` instead, which is the same here: the environment is built
    from nothing and the child drops its script directory from ``sys.path`` itself."""
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": workdir,
           "TMPDIR": workdir}
    flags = ["-I"]
    if hash_seed is not None:
        env["PYTHONHASHSEED"] = str(hash_seed)
        flags = ["-s"]
    return subprocess.Popen([python or sys.executable, *flags, "-B", CHILD_PATH, driver],
                            stdin=subprocess.PIPE, stdout=stdout, stderr=stderr, env=env, cwd=workdir,
                            start_new_session=True, close_fds=True, pass_fds=pass_fds, bufsize=bufsize)


def kill_group(proc: subprocess.Popen[bytes] | None, *, wait_s: float = 5.0) -> int | None:
    """SIGKILL the child's whole process group, reap it and close its pipes; its exit code."""
    if proc is None:
        return None
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        with contextlib.suppress(OSError):
            proc.kill()
    try:
        rc = proc.wait(timeout=wait_s)
    except subprocess.TimeoutExpired:
        rc = None
    for f in (proc.stdin, proc.stdout, proc.stderr):
        with contextlib.suppress(OSError):
            if f is not None:
                f.close()
    return rc


@dataclass
class Child:
    """A started child and its directory, released together."""

    proc: subprocess.Popen[bytes] | None = None
    workdir: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def kill(self) -> None:
        proc, self.proc = self.proc, None
        kill_group(proc)
        workdir, self.workdir = self.workdir, None
        remove_workdir(workdir)
