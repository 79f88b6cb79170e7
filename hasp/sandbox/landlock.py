"""Landlock: confine a child's file access to its private directory (and, for reads, the stdlib).

Where the kernel has Landlock, a program under test (and the checker that runs its
tests) may read, write, create and remove files beneath its own temp dir, read and
write ``/dev/null``, read the standard library (not its ``site-packages``) and the
directories of the shared libraries the interpreter loads (``confine_program``),
and open nothing else: a world-readable host file, the project's tree or an
installed package cannot be read. Every file right involved exists from ABI 1;
from ABI 4 TCP bind/connect are refused and from ABI 6 signals and abstract unix
sockets are scoped to the sandbox. The seccomp profile is then the lighter one
(``PROGRAM_PROFILE``); without Landlock the strict profile makes even the temp dir
read-only, but nothing stops a read, hence the next paragraph but one.

A PF worker needs no file at all once it is set up, so ``deny_all_files`` handles every
filesystem right (reading included) and grants none: even code that got past the static
policy and the restricted runtime cannot open a file, and from ABI 6 cannot signal a
process outside its own Landlock domain.

Every child always asks for Landlock: on a kernel without it the layer is missing like
any other (the child refuses, or records it under ``sandbox.allow_weaker``), because
without it a child running as ``nobody`` can still read every world-readable file.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from functools import lru_cache
from typing import Any

# syscall numbers are the same on every architecture; rights from <linux/landlock.h>
_NR_CREATE, _NR_ADD_RULE, _NR_RESTRICT = 444, 445, 446
_RULE_PATH_BENEATH = 1
_FS_WRITE_RIGHTS = {  # right -> first ABI that knows it
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
_FS_EXECUTE = 1 << 0
_FS_READ_RIGHTS = {1 << 2: 1, 1 << 3: 1, 1 << 15: 5}  # READ_FILE, READ_DIR, IOCTL_DEV -> first ABI
_FS_DEVNULL_RIGHTS = (1 << 1) | (1 << 14)    # WRITE_FILE | TRUNCATE on /dev/null
_FS_DEVICE_RIGHTS = (1 << 6) | (1 << 11)     # no device nodes even in the temp dir
_NET_TCP = (1 << 0) | (1 << 1)               # BIND_TCP | CONNECT_TCP (ABI 4)
_SCOPES = (1 << 0) | (1 << 1)                # ABSTRACT_UNIX_SOCKET | SIGNAL (ABI 6)


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def _fail(what: str) -> None:
    e = ctypes.get_errno()
    raise OSError(e, f"{what}: {os.strerror(e)}")


@lru_cache(maxsize=1)
def abi() -> int:
    """The kernel's Landlock ABI version (< 1: not available)."""
    try:
        return int(_libc().syscall(_NR_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))
    except (OSError, AttributeError):
        return -1


class _Attr(ctypes.Structure):
    _fields_ = [("fs", ctypes.c_uint64), ("net", ctypes.c_uint64), ("scoped", ctypes.c_uint64)]


class _Beneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _restrict(handled: dict[int, int], prot: dict, rules: Callable[[Any, int, int, int], None]) -> int:
    """Create a ruleset handling ``handled`` rights (those the kernel's ABI knows), let ``rules(libc,
    ruleset fd, fs rights, ABI)`` add exceptions, then restrict the calling process; returns the ABI."""
    libc = _libc()
    level = int(libc.syscall(_NR_CREATE, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))
    if level < 1:
        _fail("landlock unsupported")
    fs = _FS_EXECUTE
    for right, since in handled.items():
        if level >= since:
            fs |= right
    attr = _Attr(fs, _NET_TCP if level >= 4 else 0, _SCOPES if level >= 6 else 0)
    size = 8 if level < 4 else 16 if level < 6 else 24
    rfd = libc.syscall(_NR_CREATE, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if rfd < 0:
        _fail("landlock_create_ruleset")
    try:
        rules(libc, rfd, fs, level)
        if libc.syscall(_NR_RESTRICT, ctypes.c_int(rfd), ctypes.c_uint32(0)) != 0:
            _fail("landlock_restrict_self")
    finally:
        os.close(rfd)
    prot["landlock_net"] = level >= 4
    prot["landlock_scoped"] = level >= 6
    return level


def deny_all_files(prot: dict) -> int:
    """No filesystem access at all for the calling process; returns the ABI (raises OSError)."""
    level = _restrict({**_FS_WRITE_RIGHTS, **_FS_READ_RIGHTS}, prot, lambda *_: None)
    prot["landlock_files"] = "none"
    return level


_READ_FILE, _READ_DIR = 1 << 2, 1 << 3
_NOT_READ = ("site-packages", "dist-packages")  # beneath the stdlib on some layouts: not the stdlib


def read_plan() -> dict[str, Any]:
    """What a program may read, taken while the process can still reach it (before the uid drop:
    the interpreter may sit below a directory only root can enter, e.g. /root/.pyenv).

    The standard library: its directory may be listed (the import system lists it) and every
    entry in it but ``site-packages`` read (it holds ``lib-dynload``); the directories of the
    shared libraries this interpreter has mapped (where the libraries its extension modules load
    live: libc, libffi, libcrypto... unless one of them is an ancestor of the stdlib, like
    pyenv's ``lib``), and the loader's cache. Returns ``{"stdlib_fd", "entries", "paths"}``; the
    fd is an ``O_PATH`` handle that ``confine_program`` closes."""
    stdlib = os.path.dirname(os.path.realpath(os.__file__))
    entries = [(n, os.path.isdir(os.path.join(stdlib, n))) for n in sorted(os.listdir(stdlib)) if n not in _NOT_READ]
    dirs: set[str] = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split(None, 5)
            path = parts[5].strip() if len(parts) == 6 else ""
            if path.startswith("/") and ".so" in os.path.basename(path):
                d = os.path.dirname(os.path.realpath(path))
                if not (stdlib + "/").startswith(d.rstrip("/") + "/") and not d.startswith(stdlib + "/"):
                    dirs.add(d)
    paths = [(d, _READ_FILE) for d in sorted(dirs)]
    if os.path.isfile("/etc/ld.so.cache"):
        paths.append(("/etc/ld.so.cache", _READ_FILE))
    return {"stdlib_fd": os.open(stdlib, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC), "stdlib": stdlib,
            "entries": entries, "paths": paths}


def _add(libc: Any, rfd: int, pfd: int, rights: int, what: str) -> None:
    try:
        rule = _Beneath(rights, pfd)
        if libc.syscall(_NR_ADD_RULE, ctypes.c_int(rfd), ctypes.c_int(_RULE_PATH_BENEATH),
                        ctypes.byref(rule), ctypes.c_uint32(0)) != 0:
            _fail(f"landlock_add_rule({what})")
    finally:
        os.close(pfd)


def confine_program(workdir: str, plan: dict[str, Any], prot: dict) -> int:
    """A program under test: reads and writes beneath ``workdir``; reads of the standard library
    and the interpreter's shared libraries (``read_plan``); /dev/null read and written; nothing
    else, not even a read of a world-readable file. Returns the ABI (raises OSError)."""
    stdlib_fd = plan["stdlib_fd"]

    def rules(libc: Any, rfd: int, fs: int, level: int) -> None:
        def add(pfd: int, rights: int, what: str) -> None:  # only rights this ABI handles
            _add(libc, rfd, pfd, rights & fs, what)

        add(os.open(workdir, os.O_PATH | os.O_CLOEXEC), fs & ~_FS_EXECUTE & ~_FS_DEVICE_RIGHTS, workdir)
        add(os.open(os.devnull, os.O_PATH | os.O_CLOEXEC), _FS_DEVNULL_RIGHTS | _READ_FILE, os.devnull)
        add(os.dup(stdlib_fd), _READ_DIR, plan["stdlib"])
        for name, is_dir in plan["entries"]:
            try:
                pfd = os.open(name, os.O_PATH | os.O_CLOEXEC, dir_fd=stdlib_fd)
            except FileNotFoundError:  # a dangling link: nothing to read there
                continue
            add(pfd, _READ_FILE | (_READ_DIR if is_dir else 0), name)
        for path, rights in plan["paths"]:
            add(os.open(path, os.O_PATH | os.O_CLOEXEC), rights, path)

    try:
        level = _restrict({**_FS_WRITE_RIGHTS, **_FS_READ_RIGHTS}, prot, rules)
    finally:
        os.close(stdlib_fd)
    prot["landlock_files"] = "workdir, stdlib"
    prot["landlock_reads"] = [plan["stdlib"] + " (not site-packages)"] + [p for p, _ in plan["paths"]]
    return level
